"""Moving one page between memory and a file: one vectored call each way, hashed as the bytes pass."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hicache_storage_slab.page_io import (
    DIRECT_ALIGN,
    DirectRefused,
    direct_aligned,
    page_checksum,
    read_hashed,
    segment_range,
    write_hashed,
)
from hicache_storage_slab.records import checksum_seed, key_digest
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 50), min_size=1, max_size=6),
    bounds=st.tuples(st.integers(0, 300), st.integers(0, 300)),
)
def test_segment_range_covers_exactly_the_bytes_asked_for(sizes: list[int], bounds: tuple[int, int]) -> None:
    data = bytes(range(256)) * 2
    segments, position = [], 0
    for size in sizes:
        segments.append(memoryview(data[position : position + size]))
        position += size
    offset = min(bounds[0], position - 1)
    length = min(max(1, bounds[1]), position - offset)  # chunks hold bytes: never an empty range
    views = segment_range(segments, offset, length)
    assert b"".join(bytes(view) for view in views) == data[offset : offset + length]
    assert all(view.nbytes for view in views)


def test_segment_range_flattens_typed_views() -> None:
    words = memoryview(bytearray(range(16))).cast("H")  # 8 two-byte items
    (view,) = segment_range([words], 3, 6)
    assert view.format == "B" and bytes(view) == bytes(range(3, 9))


def test_only_block_aligned_memory_and_lengths_go_direct() -> None:
    block = mmap.mmap(-1, 4 * DIRECT_ALIGN)
    view = memoryview(block)
    assert direct_aligned([view[:DIRECT_ALIGN], view[DIRECT_ALIGN:]])
    assert not direct_aligned([view[: DIRECT_ALIGN - 512]])  # a length that is not whole blocks
    assert not direct_aligned([view[512 : 512 + DIRECT_ALIGN]])  # an address that is not on a block
    assert not direct_aligned([memoryview(b"x" * DIRECT_ALIGN)])  # read-only memory: no address to check
    del view
    block.close()


def test_a_page_is_hashed_as_it_is_written_and_read(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        digest = key_digest(b"page")
        page = [memoryview(os.urandom(3000)), memoryview(os.urandom(1096))]
        written = xxhash.xxh3_64(seed=checksum_seed(digest))
        write_hashed(fd, page, 8192, 4096, written)
        assert written.intdigest() == page_checksum(page, digest)
        out = [memoryview(bytearray(1000)), memoryview(bytearray(3096))]
        read = xxhash.xxh3_64(seed=checksum_seed(digest))
        assert read_hashed(fd, out, 8192, 4096, read)
        assert read.intdigest() == written.intdigest() and b"".join(out) == b"".join(page)
        assert not read_hashed(fd, out, 8192 + 100, 4096, xxhash.xxh3_64())  # past the end: a short read
        assert page_checksum(page, key_digest(b"other")) != page_checksum(page, digest)
    finally:
        os.close(fd)


@pytest.mark.parametrize(("code", "raised"), [(errno.EINVAL, DirectRefused), (errno.EIO, OSError)])
def test_a_refused_transfer_is_told_apart_from_an_io_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, raised: type[Exception]
) -> None:
    def refuse(*_args: Any) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "pwritev", refuse)
    monkeypatch.setattr(os, "preadv", refuse)
    hasher = xxhash.xxh3_64()
    page = [memoryview(bytearray(4096))]
    with pytest.raises(raised) as caught:
        write_hashed(3, page, 0, 4096, hasher)
    assert isinstance(caught.value, DirectRefused) == (code == errno.EINVAL)
    with pytest.raises(raised):
        read_hashed(3, page, 0, 4096, hasher)
    assert hasher.intdigest() == xxhash.xxh3_64().intdigest()  # nothing was hashed
