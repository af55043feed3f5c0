"""Page I/O on an open store: round trips, chunked pages, the I/O paths (zero copy, threads, O_DIRECT,
fsync), rewrites, damage and races.

Round trips of every dtype, misses, restart, delete and the outage are also the conformance suite's
(``test_conformance.py``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab import SlotStore, store_files
from hicache_storage_slab.index import SlabIndex
from hicache_storage_slab.records import key_digest
from hicache_storage_slab.store import Store
from slab_support import (
    AlignedPages,
    entry_of,
    indices,
    make_backend,
    make_pool,
    page_bytes,
    page_space,
    slab_backend,
    storage_keys,
    the_store,
)

from hicache_storage import HiCacheStorage
from hicache_storage import testing as kit
from hicache_storage.host_pool import LAYOUTS


class IoLog:
    """Wraps ``os.pwritev``/``os.preadv``/``os.fdatasync`` and the index's ``commit``/``sync`` to log what
    the store does: (event, descriptor, arguments, thread)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, int, Any, int]] = []
        self.lock = threading.Lock()
        for name in ("pwritev", "preadv", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))
        for name in ("commit", "sync"):
            monkeypatch.setattr(SlabIndex, name, self._wrap_method(name, getattr(SlabIndex, name)))

    def _log(self, event: str, fd: int, args: Any) -> None:
        with self.lock:
            self.events.append((event, fd, args, threading.get_ident()))

    def _wrap(self, name: str, real: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            self._log(name, fd, args)
            return real(fd, *args)

        return call

    def _wrap_method(self, name: str, real: Any) -> Any:
        def call(index: SlabIndex, *args: Any, **kwargs: Any) -> Any:
            self._log(name, -1, args)
            return real(index, *args, **kwargs)

        return call

    def of(self, name: str) -> list[tuple[int, Any, int]]:
        return [(fd, args, thread) for event, fd, args, thread in self.events if event == name]


def read_back(storage: HiCacheStorage, keys: list[str], first_slot: int) -> list[bool]:
    return storage.batch_get_v1(keys, indices(first_slot, len(keys)))


def address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize(
    ("layout", "mla"), [(layout, False) for layout in LAYOUTS] + [(l, True) for l in LAYOUTS if l != "page_head"]
)
def test_round_trips_on_every_host_layout(tmp_path: Path, layout: str, mla: bool) -> None:
    pool = make_pool(layout=layout, is_mla=mla)
    storage = make_backend(tmp_path, pool)
    keys = kit.random_keys(4)
    assert storage.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    assert storage.batch_exists_each([*keys, "absent"]) == [True] * 4 + [False]
    assert read_back(storage, [*keys, "absent"], 8) == [True] * 4 + [False]
    assert [page_bytes(pool, 8 + i) for i in range(4)] == [page_bytes(pool, i) for i in range(4)]
    storage.clear()
    storage.close()


@pytest.mark.parametrize(("size", "segments"), [(600 << 10, 1), (600 << 10, 3), (100_000, 4), (64 << 10, 2)])
def test_pages_larger_than_a_region_round_trip_and_a_damaged_chunk_is_a_miss(
    tmp_path: Path, size: int, segments: int
) -> None:
    storage = make_backend(tmp_path, region_bytes=64 << 10)
    backend = slab_backend(storage)
    plan = the_store(storage).plan(size)
    assert plan.chunk_bytes <= 64 << 10 and (plan.chunks > 1) == (size > 64 << 10)
    space, ctx = page_space(size)
    pages = AlignedPages(2, size, segments=segments)
    data = os.urandom(size)
    pages.fill(0, data)
    (skey,) = space.storage_keys(kit.random_keys(1))
    assert backend.write_pages([skey], pages.pages[:1], ctx) == [True]
    assert backend.read_pages([skey], pages.pages[1:], ctx) == [True]
    assert pages.data(1) == data
    slots = SlotStore(backend)
    assert slots[skey] == data  # the chunks in order are the page
    for offset, length in plan.bounds()[:: max(1, plan.chunks // 3)]:  # a byte in the first, a middle, the last chunk
        damaged = bytearray(data)
        damaged[offset + length - 1] ^= 0x01
        slots[skey] = bytes(damaged)
        before = storage.stats.get("integrity_failures")
        assert backend.read_pages([skey], pages.pages[1:], ctx) == [False]
        assert storage.stats.get("integrity_failures") == before + 1
        assert slots.get(skey) is None  # the damaged page's entry is gone ...
        assert backend.write_pages([skey], pages.pages[:1], ctx) == [True]  # ... so writing it stores it anew
        assert backend.read_pages([skey], pages.pages[1:], ctx) == [True] and pages.data(1) == data
    storage.clear()
    storage.close()


def test_a_page_of_another_size_is_refused(tmp_path: Path) -> None:
    storage = make_backend(tmp_path)
    store = the_store(storage)
    assert store.write(["k"], [[memoryview(bytearray(100))]], 200) == [False]
    assert store.write(["k"], [[memoryview(bytearray(200))]], 200) == [True]
    assert store.read(["k"], [[memoryview(bytearray(100))]]) == [False]  # a wrong-size read: a miss, not damage
    assert storage.stats.get("integrity_failures") == 0
    out = bytearray(200)
    assert store.read(["k"], [[memoryview(out)]]) == [True]
    storage.clear()
    storage.close()


# ----------------------------------------------------------------------------- I/O paths
def test_pages_move_straight_between_host_memory_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool(layout="layer_first")
    storage = make_backend(tmp_path, pool, io_threads=1)
    keys = kit.random_keys(3)
    log = IoLog(monkeypatch)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert read_back(storage, keys, 4) == [True] * 3
    data_fds = {file.fd for file in slab_backend(storage).data_files()}
    writes = [[address(memoryview(b)) for b in args[0]] for fd, args, _t in log.of("pwritev") if fd in data_fds]
    reads = [[address(memoryview(b)) for b in args[0]] for fd, args, _t in log.of("preadv") if fd in data_fds]
    assert writes == [[address(s) for s in pool.page_segments(p * pool.page_size)] for p in range(3)]
    assert reads == [[address(s) for s in pool.page_segments(p * pool.page_size)] for p in range(4, 7)]
    storage.clear()
    storage.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_io_threads_spread_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    storage = make_backend(tmp_path, io_threads=threads)
    assert slab_backend(storage).io_threads == threads
    keys = kit.random_keys(8)
    log = IoLog(monkeypatch)
    assert storage.batch_set_v1(keys, indices(0, 8)) == [True] * 8
    assert len({thread for _fd, _args, thread in log.of("pwritev")}) == threads
    storage.clear()
    storage.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_fsync_makes_payloads_durable_before_the_index_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    storage = make_backend(tmp_path, fsync=fsync, io_threads=2)
    keys = kit.random_keys(4)
    log = IoLog(monkeypatch)
    assert storage.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    kinds = [event for event, _fd, _args, _thread in log.events if event != "preadv"]
    if not fsync:
        assert kinds == ["pwritev"] * 4 + ["commit"]
    else:
        data_fds = [file.fd for file in slab_backend(storage).data_files()]
        assert kinds == ["pwritev"] * 4 + ["fdatasync"] * len(data_fds) + ["commit", "sync"]
        assert [fd for fd, _args, _thread in log.of("fdatasync")] == data_fds
    storage.clear()
    storage.close()


def test_direct_io_moves_aligned_pages_and_buffers_the_rest(disk_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = make_backend(disk_dir, direct_io=True, region_bytes=64 << 10)
    backend = slab_backend(storage)
    files = backend.data_files()
    if storage.stats.get("direct_io_unsupported"):
        pytest.skip(f"O_DIRECT is not supported where {disk_dir} lives")
    assert all(file.direct_fd is not None for file in files)
    buffered = {file.fd for file in files}
    direct = {file.direct_fd for file in files}
    log = IoLog(monkeypatch)
    keys = kit.random_keys(2)  # 768-byte pages: never moved with O_DIRECT
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert {fd for fd, _args, _thread in log.of("pwritev")} <= buffered
    for size in (8192, 192 << 10):  # one chunk; three chunks of a 64 KiB region
        log.events.clear()
        space, ctx = page_space(size, pool=f"p{size}")
        pages = AlignedPages(4, size)
        for p in range(2):
            pages.fill(p, os.urandom(size))
        skeys = space.storage_keys(kit.random_keys(2))
        assert backend.write_pages(skeys, pages.pages[:2], ctx) == [True, True]
        assert backend.read_pages(skeys, pages.pages[2:], ctx) == [True, True]
        assert [pages.data(2), pages.data(3)] == [pages.data(0), pages.data(1)]
        assert {fd for fd, _args, _thread in log.of("pwritev")} <= direct
        assert {fd for fd, _args, _thread in log.of("preadv")} <= direct
    assert storage.stats.get("direct_io_fallbacks") == 0
    storage.clear()
    storage.close()


def test_direct_io_falls_back_where_the_platform_has_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_files, "_O_DIRECT", 0)
    storage = make_backend(tmp_path, direct_io=True)
    assert storage.stats.get("direct_io_unsupported") == 1
    assert all(file.direct_fd is None for file in slab_backend(storage).data_files())
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert read_back(storage, keys, 4) == [True, True]
    storage.clear()
    storage.close()


def test_direct_io_refused_by_the_kernel_falls_back_per_chunk(disk_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = make_backend(disk_dir, direct_io=True)
    backend = slab_backend(storage)
    if storage.stats.get("direct_io_unsupported"):
        pytest.skip(f"O_DIRECT is not supported where {disk_dir} lives")
    direct = {file.direct_fd for file in backend.data_files()}
    real_pwritev, real_preadv = os.pwritev, os.preadv

    def refuse(real: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            if fd in direct:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, *args)

        return call

    monkeypatch.setattr(os, "pwritev", refuse(real_pwritev))
    monkeypatch.setattr(os, "preadv", refuse(real_preadv))
    space, ctx = page_space(8192)
    pages = AlignedPages(2, 8192)
    pages.fill(0, os.urandom(8192))
    (skey,) = space.storage_keys(kit.random_keys(1))
    assert backend.write_pages([skey], pages.pages[:1], ctx) == [True]
    assert backend.read_pages([skey], pages.pages[1:], ctx) == [True]
    assert pages.data(1) == pages.data(0)
    assert storage.stats.get("direct_io_fallbacks") == 2
    storage.clear()
    storage.close()


# ----------------------------------------------------------------------------- rewrites
def test_the_same_bytes_rewritten_take_no_new_slot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = make_backend(tmp_path)
    keys = kit.random_keys(3)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    before = [entry_of(storage, key) for key in keys]
    log = IoLog(monkeypatch)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert log.of("pwritev") == [] and log.of("commit") == []  # made recent, nothing moved
    after = [entry_of(storage, key) for key in keys]
    assert [entry.refs for entry in after] == [entry.refs for entry in before]
    assert all(new.seq > old.seq for new, old in zip(after, before, strict=True))
    index = the_store(storage).opened.index
    assert index.page_count() == 3 and index.claim_count() == 0
    storage.clear()
    storage.close()


def test_a_rewrite_keeps_the_old_copy_readable_until_it_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = make_backend(tmp_path)
    backend = slab_backend(storage)
    space, ctx = page_space(8192)
    (key,) = space.storage_keys(kit.random_keys(1))
    old, new = bytearray(b"o" * 8192), bytearray(b"n" * 8192)
    assert backend.write_pages([key], [[memoryview(old)]], ctx) == [True]
    first = the_store(storage).opened.index.lookup([key_digest(key.encode())])[0]
    seen: list[bytes] = []
    real = SlabIndex.commit

    def commit(index: SlabIndex, *args: Any, **kwargs: Any) -> Any:
        out = bytearray(8192)  # the new bytes are in their slots now, not yet published
        assert backend.read_pages([key], [[memoryview(out)]], ctx) == [True]
        seen.append(bytes(out))
        return real(index, *args, **kwargs)

    monkeypatch.setattr(SlabIndex, "commit", commit)
    assert backend.write_pages([key], [[memoryview(new)]], ctx) == [True]
    assert seen == [bytes(old)]
    out = bytearray(8192)
    assert backend.read_pages([key], [[memoryview(out)]], ctx) == [True] and out == new
    index = the_store(storage).opened.index
    second = index.lookup([key_digest(key.encode())])[0]
    assert first is not None and second is not None and second.refs != first.refs
    assert index.page_count() == 1  # one copy; the old slot was given back
    storage.clear()
    storage.close()


def test_a_failed_payload_write_gives_its_slots_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = make_backend(tmp_path, io_threads=1)
    real = os.pwritev
    calls = [0]

    def failing(fd: int, buffers: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", failing)
    keys = kit.random_keys(4)
    assert storage.batch_set_v1(keys, indices(0, 4)) == [False] * 4  # the batch's fault: none acknowledged
    assert storage.get_stats()["faults"] == 1
    index = the_store(storage).opened.index
    assert index.claim_count() == 0 and storage.batch_exists_each(keys)[1] is False
    monkeypatch.setattr(os, "pwritev", real)
    assert storage.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    assert read_back(storage, keys, 8) == [True] * 4
    storage.clear()
    storage.close()


# ----------------------------------------------------------------------------- damage and races
@pytest.mark.parametrize("threads", [1, 2, 3])  # the damaged pages fall in one run or in several
def test_damaged_slots_read_as_misses_and_are_counted(tmp_path: Path, threads: int) -> None:
    pool = make_pool()
    storage = make_backend(tmp_path, pool, io_threads=threads)
    keys = kit.random_keys(5)
    skeys = storage_keys(storage, keys)
    assert storage.batch_set_v1(keys, indices(0, 5)) == [True] * 5
    slots = SlotStore(slab_backend(storage))
    size = pool.bytes_per_page
    flipped = bytearray(slots[skeys[0]])  # 1. one byte flipped
    flipped[size // 2] ^= 0x40
    slots[skeys[0]] = bytes(flipped)
    slots[skeys[1]] = slots[skeys[1]][: size // 2] + page_bytes(pool, 4)[size // 2 :]  # 2. a torn write
    slots[skeys[2]] = slots[skeys[3]]  # 3. another key's bytes (its checksum is seeded by the other key)
    slots[skeys[4]] = slots[skeys[4]][:-1]  # 4. cut short (the rest zeros)
    hits = read_back(storage, keys, 8)
    assert hits == [False, False, False, True, False]
    assert page_bytes(pool, 11) == page_bytes(pool, 3)
    assert storage.stats.get("integrity_failures") == 4 and storage.stats.get("read_races") == 0
    assert storage.batch_get(keys[:3]) == [None, None, None]
    assert storage.batch_set_v1(keys, indices(0, 5)) == [True] * 5  # the damaged pages are written again
    assert read_back(storage, keys, 8) == [True] * 5
    assert [page_bytes(pool, 8 + i) for i in range(5)] == [page_bytes(pool, i) for i in range(5)]
    storage.clear()
    storage.close()


def test_a_page_rewritten_under_a_reader_is_a_counted_race(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = make_backend(tmp_path)
    store = the_store(storage)
    page = [memoryview(bytearray(b"a" * 4096))]
    assert store.write(["k"], [page], 4096) == [True]
    real = Store._read_whole  # a page of one chunk

    def rewritten_meanwhile(*args: Any) -> bool:
        assert real(*args)
        store.write(["k"], [[memoryview(bytearray(b"b" * 4096))]], 4096)  # another writer's copy commits
        return False  # and the bytes read failed their check

    monkeypatch.setattr(Store, "_read_whole", staticmethod(rewritten_meanwhile))
    assert store.read(["k"], [[memoryview(bytearray(4096))]]) == [False]
    assert storage.stats.get("read_races") == 1 and storage.stats.get("integrity_failures") == 0
    monkeypatch.undo()
    out = bytearray(4096)
    assert store.read(["k"], [[memoryview(out)]]) == [True] and out == b"b" * 4096
    storage.clear()
    storage.close()
