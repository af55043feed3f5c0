"""The slab backend in one process: pools, eviction, overwrites, integrity, restart, I/O paths.

Round trips of every layout and dtype, misses, persistence, truncated/corrupted/vanished records,
delete, clear of one's own pages and the outage are the conformance suite's (``test_conformance.py``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab import SlabBackend, SlotStore, header_map, slab_files
from hicache_storage_slab.layout import COMMITTED, ENTRY_SIZE, WRITING, key_digest
from hicache_storage_slab.raw_baseline import RawSlab
from slab_support import (
    AlignedPages,
    committed_copies,
    context,
    indices,
    keys_in_one_set,
    kv_slab,
    make_backend,
    make_pool,
    page_bytes,
    set_entries,
    slab_backend,
    storage_keys,
)

from hicache_storage import HiCacheStorage, KeySpace, make_config
from hicache_storage import testing as kit
from hicache_storage.plugin import BatchContext, raw_baseline_for


def read_back(backend: HiCacheStorage, keys: list[str], first_slot: int) -> list[bool]:
    return backend.batch_get_v1(keys, indices(first_slot, len(keys)))


# ----------------------------------------------------------------------------- pools
def test_each_pool_gets_a_slab_of_its_own_page_size(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, capacity_bytes=2 << 20, pool_capacity_bytes={"mamba": 1 << 20})
    slabs = slab_backend(backend)
    kv = context(backend)
    mamba_space = KeySpace(
        model_name="m", dtype="float32", layout="state", page_size=1, page_bytes=12_000, is_mla=False, pool="mamba"
    )
    mamba = BatchContext(pool="mamba", keyspace=mamba_space)
    state = AlignedPages(2, 12_000, segments=3)
    state.fill(0, os.urandom(12_000))
    bare = kit.random_keys(1)[0]
    kv_key, mamba_key = kv.keyspace.storage_key(bare), mamba_space.storage_key(bare)
    assert slabs.write_pages([mamba_key], [state.pages[0]], mamba) == [True]
    assert slabs.read_pages([mamba_key], [state.pages[1]], mamba) == [True]
    assert state.data(1) == state.data(0)
    assert slabs.pages_exist([mamba_key, kv_key], mamba) == [True, False]
    assert slabs.pages_exist([kv_key], kv) == [False]
    geometries = {s.prefix: s.geometry for s in (slabs.slab(kv.keyspace), slabs.slab(mamba_space))}
    assert geometries[mamba_space.prefix].page_bytes == 12_000
    assert geometries[mamba_space.prefix].total_bytes <= 1 << 20
    assert geometries[kv.keyspace.prefix].page_bytes == kv.keyspace.page_bytes
    assert geometries[kv.keyspace.prefix].total_bytes <= 2 << 20
    names = sorted(p.name for p in tmp_path.iterdir() if "slab-" in p.name)
    assert names == sorted([f"{kv.keyspace.prefix}slab-0", f"{mamba_space.prefix}slab-0"])
    backend.close()


def test_a_pool_without_bytes_gets_no_slab(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    empty = KeySpace(
        model_name="m", dtype="none", layout="none", page_size=1, page_bytes=0, is_mla=False, pool="anchor"
    )
    slab_backend(backend).on_register_pool(None, empty)
    assert [p.name for p in tmp_path.iterdir() if "slab-" in p.name] == [f"{backend.pool_keyspace().prefix}slab-0"]
    backend.close()


# ----------------------------------------------------------------------------- eviction and overwrites
def test_eviction_takes_the_least_recently_written_slot_of_the_set(tmp_path: Path) -> None:
    pool = make_pool(num_pages=16)
    backend = make_backend(tmp_path, pool, capacity_bytes=64 * 1024, ways=4)
    keys = keys_in_one_set(backend, 6)
    for slot, key in enumerate(keys[:4]):
        assert backend.batch_set_v1([key], indices(slot, 1)) == [True]
    assert backend.batch_exists_each(keys[:4]) == [True] * 4
    assert backend.batch_set_v1([keys[4]], indices(4, 1)) == [True]
    assert backend.stats.get("evictions") == 1
    assert backend.batch_exists_each(keys[:5]) == [False, True, True, True, True]
    # Rewriting a stored page with its own bytes happens in place: nothing is evicted, and it counts as recent.
    assert backend.batch_set_v1([keys[1]], indices(1, 1)) == [True]
    assert backend.stats.get("evictions") == 1
    assert backend.batch_set_v1([keys[5]], indices(5, 1)) == [True]
    assert backend.batch_exists_each(keys) == [False, True, False, True, True, True]
    assert read_back(backend, [keys[1], keys[5]], 8) == [True, True]
    assert page_bytes(pool, 8) == page_bytes(pool, 1) and page_bytes(pool, 9) == page_bytes(pool, 5)
    backend.close()


def test_overwrite_with_new_bytes_wins_and_leaves_one_copy(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool)
    (key,) = kit.random_keys(1)
    (skey,) = storage_keys(backend, [key])
    assert backend.batch_set_v1([key], indices(0, 1)) == [True]
    assert backend.batch_set_v1([key], indices(1, 1)) == [True]
    assert committed_copies(backend, skey) == 1
    assert read_back(backend, [key], 4) == [True]
    assert page_bytes(pool, 4) == page_bytes(pool, 1) != page_bytes(pool, 0)
    backend.close()


def test_threads_of_one_process_never_take_each_others_slots(tmp_path: Path) -> None:
    pool = make_pool(num_pages=24)
    backend = make_backend(tmp_path, pool, capacity_bytes=64 * 1024, ways=4, io_threads=4)
    keys = keys_in_one_set(backend, 8)
    assert backend.batch_set_v1(keys[:4], indices(0, 4)) == [True] * 4
    assert read_back(backend, keys[:4], 12) == [True] * 4
    assert [page_bytes(pool, 12 + i) for i in range(4)] == [page_bytes(pool, i) for i in range(4)]
    assert backend.batch_set_v1(keys, indices(0, 8)) == [True] * 8  # twice the set's ways in one batch
    hits = read_back(backend, keys, 12)
    assert sum(hits) == 4, hits
    for i, hit in enumerate(hits):
        assert not hit or page_bytes(pool, 12 + i) == page_bytes(pool, i)
    assert backend.stats.get("write_races") == 0
    backend.close()


# ----------------------------------------------------------------------------- visibility and integrity
def test_a_page_is_invisible_until_its_header_commits(tmp_path: Path) -> None:
    """A writer that dies between payload and commit leaves a claimed slot that reads as a miss."""
    pool = make_pool()
    backend = make_backend(tmp_path, pool)
    old, fresh = kit.random_keys(2)
    skey_old, skey_fresh = storage_keys(backend, [old, fresh])
    assert backend.batch_set_v1([old], indices(0, 1)) == [True]
    slab_ = kv_slab(backend)
    for skey, slot in ((skey_fresh, 2), (skey_old, 3)):  # a new key, and new bytes for a stored key
        plan = slab_.stage(skey, pool.page_segments(slot * pool.page_size))
        assert plan is not None and not plan.in_place
        assert any(e.state == WRITING and e.digest == key_digest(skey) for _o, e in set_entries(backend, skey))
    other = make_backend(tmp_path, make_pool())  # another process's view: the same files
    assert other.batch_exists_each([fresh, old]) == [False, True]
    assert read_back(other, [fresh, old], 4) == [False, True]
    assert page_bytes(other.mem_pool_host, 5) == page_bytes(pool, 0)  # the committed old bytes, not the staged ones
    assert backend.batch_set_v1([fresh], indices(2, 1)) == [True]  # the key can be written again
    assert read_back(other, [fresh], 6) == [True] and page_bytes(other.mem_pool_host, 6) == page_bytes(pool, 2)
    other.close()
    backend.close()


def _record(backend: HiCacheStorage, skey: str) -> tuple[Any, int, int]:
    where = kv_slab(backend).locate(skey)
    assert where is not None
    return where


def test_damaged_slots_read_as_misses_and_are_counted(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool)
    keys = kit.random_keys(6)
    skeys = storage_keys(backend, keys)
    assert backend.batch_set_v1(keys, indices(0, 6)) == [True] * 6
    store = SlotStore(slab_backend(backend))
    size = pool.bytes_per_page

    # 1. one payload byte flipped
    record = bytearray(store[skeys[0]])
    record[ENTRY_SIZE + size // 2] ^= 0x40
    store[skeys[0]] = bytes(record)
    # 2. one header byte flipped (the key's digest): the header is damaged
    file, header_offset, _slot = _record(backend, skeys[1])
    damaged = bytearray(os.pread(file.fd, ENTRY_SIZE, header_offset))
    damaged[30] ^= 0x01
    os.pwrite(file.fd, bytes(damaged), header_offset)
    # 3. a torn write: the second half of the payload is another page's bytes
    file, _h, slot_offset = _record(backend, skeys[2])
    os.pwrite(file.fd, page_bytes(pool, 5)[size // 2 :], slot_offset + size // 2)
    # 4. the header of key 3 over the slot of key 4 (another key's header, valid in itself)
    file, header3, _s = _record(backend, skeys[3])
    file4, header4, _s4 = _record(backend, skeys[4])
    os.pwrite(file4.fd, os.pread(file.fd, ENTRY_SIZE, header3), header4)

    before = backend.stats.get("integrity_failures")
    hits = read_back(backend, keys, 8)
    assert hits[:3] == [False, False, False] and hits[4] is False and hits[5] is True
    assert page_bytes(pool, 13) == page_bytes(pool, 5)
    if hits[3]:  # key 3 may find its own slot (exact) or the copied header (checksum fails): never wrong bytes
        assert page_bytes(pool, 11) == page_bytes(pool, 3)
    assert backend.stats.get("integrity_failures") - before >= 3
    assert backend.batch_get(keys[:3]) == [None, None, None]
    assert backend.batch_set_v1(keys[:3], indices(0, 3)) == [True] * 3  # damaged slots are written again
    assert read_back(backend, keys[:3], 8) == [True] * 3
    assert [page_bytes(pool, 8 + i) for i in range(3)] == [page_bytes(pool, i) for i in range(3)]
    backend.close()


# ----------------------------------------------------------------------------- restart
def test_restart_serves_pages_and_a_new_geometry_replaces_the_slab(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool, capacity_bytes=2 << 20)
    keys = kit.random_keys(5)
    assert backend.batch_set_v1(keys, indices(0, 5)) == [True] * 5
    backend.close()
    again = make_backend(tmp_path, make_pool(), capacity_bytes=2 << 20)
    assert again.batch_exists_each(keys) == [True] * 5
    assert read_back(again, keys, 8) == [True] * 5
    assert [page_bytes(again.mem_pool_host, 8 + i) for i in range(5)] == [page_bytes(pool, i) for i in range(5)]
    assert again.stats.get("slabs_created") == 0 and again.stats.get("slabs_replaced") == 0
    again.close()
    larger = make_backend(tmp_path, make_pool(), capacity_bytes=3 << 20)
    assert larger.stats.get("slabs_replaced") == 1
    assert larger.batch_exists_each(keys) == [False] * 5
    assert read_back(larger, keys, 8) == [False] * 5
    larger.close()


def test_zero_fill_writes_the_new_slab_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _Calls(monkeypatch)
    pool = make_pool()
    backend = make_backend(tmp_path, pool, capacity_bytes=1 << 20, zero_fill=True)
    assert len(slab_backend(backend).slab_files()) == 1
    geometry = kv_slab(backend).geometry
    zeroed = sum(len(args[0]) for _fd, (args, _t) in calls.of("pwrite") if len(args[0]) > 4096)
    assert zeroed == geometry.file_size - 4096  # everything past the superblock
    keys = kit.random_keys(3)
    assert backend.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert read_back(backend, keys, 4) == [True] * 3
    assert [page_bytes(pool, 4 + i) for i in range(3)] == [page_bytes(pool, i) for i in range(3)]
    backend.close()
    again = make_backend(tmp_path, make_pool(), capacity_bytes=1 << 20, zero_fill=True)  # an existing slab is kept
    assert again.stats.get("slabs_created") == 0 and again.batch_exists_each(keys) == [True] * 3
    again.close()


def test_a_damaged_superblock_replaces_the_slab(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    keys = kit.random_keys(3)
    assert backend.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    (path,) = [f.path for f in kv_slab(backend).files]
    backend.close()
    with open(path, "r+b") as handle:
        handle.seek(40)
        byte = handle.read(1)
        handle.seek(40)
        handle.write(bytes([byte[0] ^ 0xFF]))
    again = make_backend(tmp_path)
    assert again.stats.get("slabs_replaced") == 1
    assert again.batch_exists_each(keys) == [False] * 3
    assert again.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    again.close()


def test_clear_empties_this_key_space_or_every_slab_below_the_path(tmp_path: Path) -> None:
    def open_model(model: str) -> HiCacheStorage:
        return kit.make_backend(
            SlabBackend, {"path": str(tmp_path), "capacity_bytes": 1 << 20}, make_pool(), model=model
        )

    first, second = open_model("m1"), open_model("m2")
    keys = kit.random_keys(3)
    assert first.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert second.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    second.clear()  # its own key space only
    assert second.batch_exists_each(keys) == [False] * 3
    assert first.batch_exists_each(keys) == [True] * 3
    assert second.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    first.close()
    second.clear(everything=True)  # every slab below the path, open here or not
    assert second.batch_exists_each(keys) == [False] * 3
    reopened = open_model("m1")
    assert reopened.batch_exists_each(keys) == [False] * 3
    second.close()
    reopened.close()


# ----------------------------------------------------------------------------- I/O paths
class _Calls:
    """Wraps ``os.pwritev``/``os.preadv``/``os.pwrite``/``os.fdatasync`` and the header writes (event
    ``header``, logged with the header's offset as its descriptor) to log what the backend does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, int, Any]] = []
        self.lock = threading.Lock()
        for name in ("pwritev", "preadv", "pwrite", "fdatasync"):
            monkeypatch.setattr(os, name, self._wrap(name, getattr(os, name)))
        for kind in (header_map.MappedHeaders, header_map.PositionalHeaders):
            monkeypatch.setattr(kind, "write", self._wrap_header(kind.write))

    def _wrap_header(self, real: Any) -> Any:
        def write(headers: Any, offset: int, data: bytes) -> None:
            with self.lock:
                self.events.append(("header", offset, ((data,), threading.get_ident())))
            real(headers, offset, data)

        return write

    def _wrap(self, name: str, real: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            with self.lock:
                self.events.append((name, fd, (args, threading.get_ident())))
            return real(fd, *args)

        return call

    def of(self, name: str) -> list[tuple[int, Any]]:
        return [(fd, detail) for event, fd, detail in self.events if event == name]


def _address(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def test_pages_move_straight_between_host_memory_and_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool(layout="layer_first")
    backend = make_backend(tmp_path, pool, io_threads=1)
    keys = kit.random_keys(3)
    calls = _Calls(monkeypatch)
    assert backend.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert read_back(backend, keys, 4) == [True] * 3
    expected_writes = [[_address(s) for s in pool.page_segments(p * pool.page_size)] for p in range(3)]
    expected_reads = [[_address(s) for s in pool.page_segments(p * pool.page_size)] for p in range(4, 7)]
    kv_fds = {file.fd for file in kv_slab(backend).files}  # not the manifest's slab
    writes = [[_address(memoryview(b)) for b in args[0]] for fd, (args, _t) in calls.of("pwritev") if fd in kv_fds]
    reads = [[_address(memoryview(b)) for b in args[0]] for fd, (args, _t) in calls.of("preadv") if fd in kv_fds]
    assert writes == expected_writes  # the page's own segments, no staging buffer
    assert reads == expected_reads
    backend.close()


def test_headers_are_stored_through_the_mapping_not_pwrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_backend(tmp_path, io_threads=1)
    keys = kit.random_keys(3)
    calls = _Calls(monkeypatch)
    assert backend.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert calls.of("pwrite") == []  # a claim and a commit per page, both stores into the mapping
    assert [len(args[0]) for _offset, (args, _t) in calls.of("header")] == [ENTRY_SIZE] * 6
    assert all(isinstance(file.headers, header_map.MappedHeaders) for file in slab_backend(backend).slab_files())
    other = make_backend(tmp_path, io_threads=1)  # another descriptor, another mapping: same bytes
    assert read_back(other, keys, 4) == [True] * 3
    other.close()
    backend.close()


def test_slab_files_and_the_raw_baseline_read_without_readahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advised: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((fd, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    backend = make_backend(tmp_path / "slab", io_threads=1)
    random_fds = {fd for fd, advice in advised if advice == os.POSIX_FADV_RANDOM}
    assert {
        file.fd for file in slab_backend(backend).slab_files()
    } <= random_fds  # a slot is read whole, never its neighbours
    raw = RawSlab(tmp_path / "raw", reserve_bytes=1 << 20)
    assert (raw.fd, os.POSIX_FADV_RANDOM) in advised
    raw.close()
    backend.close()


def test_headers_fall_back_to_pwrite_where_the_file_cannot_be_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError(errno.ENODEV, "no mmap on this file system")

    monkeypatch.setattr(header_map.mmap, "mmap", refuse)
    backend = make_backend(tmp_path, io_threads=1)
    keys = kit.random_keys(3)
    calls = _Calls(monkeypatch)
    assert backend.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert read_back(backend, keys, 4) == [True] * 3
    assert len([fd for fd, (args, _t) in calls.of("pwrite") if len(args[0]) == ENTRY_SIZE]) == 6
    assert backend.stats.get("header_map_unsupported") >= 1
    backend.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_io_threads_spread_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    backend = make_backend(tmp_path, io_threads=threads)
    keys = kit.random_keys(8)
    calls = _Calls(monkeypatch)
    assert backend.batch_set_v1(keys, indices(0, 8)) == [True] * 8
    assert len({thread for _fd, (_args, thread) in calls.of("pwritev")}) == threads
    backend.close()


def test_fsync_syncs_payloads_before_any_header_commits_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_backend(tmp_path, fsync=True, io_threads=2)
    keys = kit.random_keys(4)
    calls = _Calls(monkeypatch)
    assert backend.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    kinds = []
    for event, _fd, (args, _thread) in calls.events:
        if event == "header" and len(args[0]) == ENTRY_SIZE:
            state = args[0][5]
            kinds.append("commit" if state == COMMITTED else "claim" if state == WRITING else "blank")
        elif event in ("pwritev", "fdatasync"):
            kinds.append(event)
    first_sync = kinds.index("fdatasync")
    assert kinds.count("pwritev") == 4 and all(k != "pwritev" for k in kinds[first_sync:])
    assert kinds.count("commit") == 4 and all(k != "commit" for k in kinds[:first_sync])
    assert kinds[-1] == "fdatasync"  # headers synced before the acknowledgement
    backend.close()


@pytest.mark.parametrize("fsync", [False, True])
def test_a_failed_payload_write_releases_its_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: bool
) -> None:
    backend = make_backend(tmp_path, fsync=fsync, io_threads=2)
    slab_ = kv_slab(backend)
    real = os.pwritev
    calls = [0]

    def failing(fd: int, buffers: Any, offset: int) -> int:
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", failing)
    keys = kit.random_keys(4)
    assert backend.batch_set_v1(keys, indices(0, 4)) == [False] * 4  # the batch's fault: no page acknowledged
    assert backend.get_stats()["faults"] == 1
    assert all(not pending for pending in slab_._pending)  # every claimed slot was released
    monkeypatch.setattr(os, "pwritev", real)
    assert backend.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    assert read_back(backend, keys, 8) == [True] * 4
    backend.close()


def test_direct_io_moves_aligned_pages_and_buffers_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool, direct_io=True)
    slabs = slab_backend(backend)
    ctx = context(backend)
    space = ctx.keyspace
    if not slabs.slab(space).direct_io:
        pytest.skip(f"O_DIRECT is not supported where {tmp_path} lives")
    (file,) = kv_slab(backend).files
    assert file.direct_fd is not None
    size = space.page_bytes
    assert size % 4096 != 0  # a 768-byte page: the pool's pages are never moved with O_DIRECT
    calls = _Calls(monkeypatch)
    keys = kit.random_keys(2)
    assert backend.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert {fd for fd, _d in calls.of("pwritev")} == {file.fd}
    # A pool of aligned 8 KiB pages goes through the direct descriptor.
    big = KeySpace(
        model_name="m", dtype="uint8", layout="page_first", page_size=1, page_bytes=8192, is_mla=False, pool="big"
    )
    big_ctx = BatchContext(pool="big", keyspace=big)
    pages = AlignedPages(4, 8192)
    for p in range(2):
        pages.fill(p, os.urandom(8192))
    big_keys = big.storage_keys(kit.random_keys(2))
    assert slabs.write_pages(big_keys, pages.pages[:2], big_ctx) == [True, True]
    assert slabs.read_pages(big_keys, pages.pages[2:], big_ctx) == [True, True]
    assert [pages.data(2), pages.data(3)] == [pages.data(0), pages.data(1)]
    direct = {f.direct_fd for f in slabs.slab(big).files}
    assert {fd for fd, _d in calls.of("pwritev")[2:]} <= direct and {fd for fd, _d in calls.of("preadv")} & direct
    assert backend.stats.get("direct_io_fallbacks") == 0
    backend.close()


def test_direct_io_falls_back_when_unsupported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slab_files, "_O_DIRECT", 0)  # as on a platform without O_DIRECT
    backend = make_backend(tmp_path, direct_io=True)
    assert kv_slab(backend).direct_io is False
    assert backend.stats.get("direct_io_unsupported") == 1
    keys = kit.random_keys(2)
    assert backend.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert read_back(backend, keys, 4) == [True, True]
    backend.close()


def test_direct_io_refused_by_the_kernel_falls_back_per_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_backend(tmp_path, direct_io=True)
    slabs = slab_backend(backend)
    big = KeySpace(
        model_name="m", dtype="uint8", layout="page_first", page_size=1, page_bytes=8192, is_mla=False, pool="big"
    )
    big_ctx = BatchContext(pool="big", keyspace=big)
    slab_ = slabs.slab(big)
    if not slab_.direct_io:
        pytest.skip(f"O_DIRECT is not supported where {tmp_path} lives")
    direct = {f.direct_fd for f in slab_.files}
    real_pwritev, real_preadv = os.pwritev, os.preadv

    def refuse(real: Any) -> Any:
        def call(fd: int, *args: Any) -> Any:
            if fd in direct:
                raise OSError(errno.EINVAL, "Invalid argument")
            return real(fd, *args)

        return call

    monkeypatch.setattr(os, "pwritev", refuse(real_pwritev))
    monkeypatch.setattr(os, "preadv", refuse(real_preadv))
    pages = AlignedPages(2, 8192)
    pages.fill(0, os.urandom(8192))
    (skey,) = big.storage_keys(kit.random_keys(1))
    assert slabs.write_pages([skey], pages.pages[:1], big_ctx) == [True]
    assert slabs.read_pages([skey], pages.pages[1:], big_ctx) == [True]
    assert pages.data(1) == pages.data(0)
    assert backend.stats.get("direct_io_fallbacks") == 2
    backend.close()


def test_raw_baseline_client(tmp_path: Path) -> None:
    raw = RawSlab(tmp_path / "raw", reserve_bytes=1 << 20, threads=2)
    keys, expected = kit.check_raw_client(raw)
    out = [memoryview(bytearray(len(e))) for e in expected]
    assert raw.get(keys, out) == [True] * len(keys)
    assert [bytes(o) for o in out] == expected
    raw.drop_cache()
    raw.close()
    assert not (tmp_path / "raw").exists()
    baseline = raw_baseline_for(
        SlabBackend, make_config("m", extra_config={"path": str(tmp_path / "slabs"), "io_threads": 3})
    )
    assert baseline.path.parent == tmp_path / "slabs" / "raw-baseline"
    assert baseline.get(keys, out) == [False] * len(keys)
    baseline.close()


# ----------------------------------------------------------------------------- large pages
@pytest.mark.parametrize("segments", [1, 3, 6])
def test_large_pages_round_trip_and_a_damaged_byte_anywhere_is_a_miss(tmp_path: Path, segments: int) -> None:
    size = 600 * 1024
    backend = make_backend(tmp_path, capacity_bytes=8 << 20)
    slabs = slab_backend(backend)
    space = KeySpace(
        model_name="m", dtype="uint8", layout="page_first", page_size=1, page_bytes=size, is_mla=False, pool="big"
    )
    ctx = BatchContext(pool="big", keyspace=space)
    pages = AlignedPages(2, size, segments=segments)
    data = os.urandom(size)
    pages.fill(0, data)
    (skey,) = space.storage_keys(kit.random_keys(1))
    assert slabs.write_pages([skey], pages.pages[:1], ctx) == [True]
    assert slabs.read_pages([skey], pages.pages[1:], ctx) == [True]
    assert pages.data(1) == data
    store = SlotStore(slabs)
    for position in (10, size // 2 + 10, size - 10):
        record = bytearray(store[skey])
        record[ENTRY_SIZE + position] ^= 0x01
        store[skey] = bytes(record)
        before = backend.stats.get("integrity_failures")
        assert slabs.read_pages([skey], pages.pages[1:], ctx) == [False]
        assert backend.stats.get("integrity_failures") == before + 1
        record[ENTRY_SIZE + position] ^= 0x01
        store[skey] = bytes(record)
        assert slabs.read_pages([skey], pages.pages[1:], ctx) == [True]
    backend.close()
