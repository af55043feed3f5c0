"""Header access of a slab file: mapped stores and positional writes land in the same page cache."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hicache_storage_slab.header_map import MappedHeaders, PositionalHeaders, open_headers
from hicache_storage_slab.layout import ENTRY_SIZE, SUPERBLOCK_SIZE

AREA_END = SUPERBLOCK_SIZE + 64 * ENTRY_SIZE


@pytest.fixture
def slab_fd(tmp_path: Path) -> Iterator[int]:
    """A slab-sized file whose blocks are allocated, as the backend creates them."""
    fd = os.open(tmp_path / "slab", os.O_RDWR | os.O_CREAT, 0o600)
    os.posix_fallocate(fd, 0, AREA_END + 4096)
    yield fd
    os.close(fd)


def test_a_mapped_store_is_what_another_descriptor_reads(slab_fd: int, tmp_path: Path) -> None:
    headers = open_headers(slab_fd, AREA_END, lambda _name: None)
    assert isinstance(headers, MappedHeaders)
    header = bytes(range(ENTRY_SIZE))
    headers.write(SUPERBLOCK_SIZE + ENTRY_SIZE, header)
    other = os.open(tmp_path / "slab", os.O_RDONLY)
    try:
        assert os.pread(other, ENTRY_SIZE, SUPERBLOCK_SIZE + ENTRY_SIZE) == header
    finally:
        os.close(other)
    os.pwrite(slab_fd, b"\xff" * ENTRY_SIZE, SUPERBLOCK_SIZE)  # a positional write is seen by a read too
    assert headers.read(SUPERBLOCK_SIZE, 2 * ENTRY_SIZE) == b"\xff" * ENTRY_SIZE + header
    headers.close()
    headers.close()  # idempotent


def test_a_mapped_store_outside_the_header_area_is_refused(slab_fd: int) -> None:
    headers = MappedHeaders(slab_fd, AREA_END)
    with pytest.raises(ValueError, match="outside the header area"):
        headers.write(0, bytes(ENTRY_SIZE))  # the superblock
    with pytest.raises(ValueError, match="outside the header area"):
        headers.write(AREA_END - 8, bytes(ENTRY_SIZE))
    assert os.pread(slab_fd, 8, 0) == bytes(8)
    headers.close()
    with pytest.raises(OSError, match="closed"):
        headers.write(SUPERBLOCK_SIZE, bytes(ENTRY_SIZE))


def test_positional_headers_where_the_file_cannot_be_mapped(slab_fd: int, monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[str] = []

    def refuse(*_args: object) -> object:
        raise OSError(19, "no mmap here")

    monkeypatch.setattr("hicache_storage_slab.header_map.mmap.mmap", refuse)
    headers = open_headers(slab_fd, AREA_END, counted.append)
    assert isinstance(headers, PositionalHeaders) and counted == ["header_map_unsupported"]
    headers.write(SUPERBLOCK_SIZE, b"h" * ENTRY_SIZE)
    assert os.pread(slab_fd, ENTRY_SIZE, SUPERBLOCK_SIZE) == b"h" * ENTRY_SIZE


def test_a_short_header_read_is_an_io_error(slab_fd: int) -> None:
    headers = PositionalHeaders(slab_fd)
    with pytest.raises(OSError, match="short read"):
        headers.read(AREA_END + 4096 - 10, ENTRY_SIZE)


def test_a_sparse_header_area_is_written_positionally(tmp_path: Path) -> None:
    """A store into a hole would allocate at fault time (SIGBUS on a full disk); pwrite says ENOSPC."""
    fd = os.open(tmp_path / "sparse", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, AREA_END + 4096)  # no blocks: where posix_fallocate is unsupported
        counted: list[str] = []
        headers = open_headers(fd, AREA_END, counted.append)
        assert isinstance(headers, PositionalHeaders) and counted == ["header_map_unsupported"]
        headers.write(SUPERBLOCK_SIZE, b"s" * ENTRY_SIZE)
        assert headers.read(SUPERBLOCK_SIZE, ENTRY_SIZE) == b"s" * ENTRY_SIZE
    finally:
        os.close(fd)
