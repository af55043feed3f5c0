"""The slab backend in one process: pools of several page sizes in one store, key spaces, clearing, a
store that cannot be opened, closing with writes in flight, and claims left by writers that died.

Persistence across processes and kill -9 are ``test_multiprocess.py``'s.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab import SlabBackend, store_files
from hicache_storage_slab import backend as backend_module
from hicache_storage_slab.store import Store
from slab_support import (
    STORE_FILES,
    AlignedPages,
    Clock,
    context,
    indices,
    make_backend,
    make_pool,
    names,
    page_space,
    slab_backend,
    the_store,
)

from hicache_storage import BackendFault, ConfigError, HiCacheStorage, KeySpace, make_config
from hicache_storage import testing as kit


def unregistered(root: Path, **options: Any) -> HiCacheStorage:
    extra = {"path": str(root), "resilience": False, "capacity_bytes": 8 << 20, "manifests": False, **options}
    return HiCacheStorage(SlabBackend, make_config("m", extra_config=extra))


# ----------------------------------------------------------------------------- pools and key spaces
def test_pools_of_every_page_size_share_one_store(tmp_path: Path) -> None:
    storage = make_backend(tmp_path)
    backend = slab_backend(storage)
    kv = context(storage)
    state_space, state = page_space(12_000, pool="mamba")
    pages = AlignedPages(2, 12_000, segments=3)
    pages.fill(0, os.urandom(12_000))
    bare = kit.random_keys(1)[0]
    kv_key, state_key = kv.keyspace.storage_key(bare), state_space.storage_key(bare)
    assert backend.write_pages([state_key], [pages.pages[0]], state) == [True]
    assert backend.read_pages([state_key], [pages.pages[1]], state) == [True] and pages.data(1) == pages.data(0)
    assert backend.pages_exist([state_key, kv_key], state) == [True, False]
    assert storage.batch_set_v1([bare], indices(0, 1)) == [True]
    assert backend.pages_exist([kv_key], kv) == [True]
    assert names(tmp_path) == STORE_FILES  # one store for both page sizes
    chunk_sizes = {entry.chunk_bytes for _digest, entry in the_store(storage).opened.index.entries(None)}
    assert chunk_sizes == {the_store(storage).plan(12_000).chunk_bytes, the_store(storage).plan(768).chunk_bytes}
    storage.clear()  # the key spaces of the registered pools: not the state page's
    assert backend.pages_exist([kv_key], kv) == [False] and backend.pages_exist([state_key], state) == [True]
    storage.close()
    assert names(tmp_path) == STORE_FILES  # a store holding a page is kept


def test_a_pool_without_bytes_opens_no_store(tmp_path: Path) -> None:
    storage = unregistered(tmp_path)
    empty = KeySpace(
        model_name="m", dtype="none", layout="none", page_size=1, page_bytes=0, is_mla=False, pool="anchor"
    )
    slab_backend(storage).on_register_pool(None, empty)  # type: ignore[arg-type]
    assert names(tmp_path) == [] and slab_backend(storage).data_files() == []
    storage.close()


def test_clear_empties_this_key_space_or_the_whole_store(tmp_path: Path) -> None:
    first, second = make_backend(tmp_path, model="m1"), make_backend(tmp_path, model="m2")
    keys = kit.random_keys(3)
    assert first.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert second.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    second.clear()  # its own key space only
    assert second.batch_exists_each(keys) == [False] * 3 and first.batch_exists_each(keys) == [True] * 3
    assert second.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    first.close()
    second.clear(everything=True)  # every page of the store, whoever wrote it
    assert second.batch_exists_each(keys) == [False] * 3
    reopened = make_backend(tmp_path, model="m1")
    assert reopened.batch_exists_each(keys) == [False] * 3
    second.close()
    reopened.close()
    assert names(tmp_path) == []


# ----------------------------------------------------------------------------- a store that cannot be opened
def test_a_path_that_cannot_be_a_directory_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as caught:
        unregistered(tmp_path / "file" / "slab")
    assert caught.value.option == "extra_config.path" and "cannot create directory" in str(caught.value)


def test_a_store_that_cannot_be_opened_fails_fast_then_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(backend_module, "open_store", broken)
    storage = unregistered(tmp_path)
    backend = slab_backend(storage)
    space, ctx = page_space(4096)
    page = [memoryview(bytearray(4096))]
    (key,) = space.storage_keys(kit.random_keys(1))
    for _ in range(2):
        with pytest.raises(BackendFault, match="Input/output error"):  # the SDK turns it into False / a miss
            backend.write_pages([key], [page], ctx)
    with pytest.raises(BackendFault):
        backend.read_pages([key], [page], ctx)
    assert storage.stats.get("store_open_failures") == 1  # the later calls did not try again
    with pytest.raises(ConfigError) as caught:
        storage.register_mem_pool_host(make_pool())
    assert caught.value.option == "extra_config.path"
    monkeypatch.setattr(backend_module, "open_store", store_files.open_store)
    monkeypatch.setattr(backend_module, "RETRY_OPEN_S", 0.0)
    backend._failure = None  # the back-off is over
    assert backend.write_pages([key], [page], ctx) == [True]
    storage.close()
    assert names(tmp_path) == STORE_FILES


# ----------------------------------------------------------------------------- closing
def block_writes(monkeypatch: pytest.MonkeyPatch, *, fail: bool = False) -> tuple[threading.Event, threading.Event]:
    """Make every page write wait, after its slots are claimed, until ``release`` is set (then write, or
    with ``fail`` raise ``EIO`` as a write into a closed store would)."""
    started, release = threading.Event(), threading.Event()
    real = Store._write_chunk

    def slow(self: Store, *args: Any) -> None:
        started.set()
        assert release.wait(30)
        if fail:
            raise OSError(errno.EIO, "the store was closed")
        real(self, *args)

    monkeypatch.setattr(Store, "_write_chunk", slow)
    return started, release


def write_in_thread(storage: HiCacheStorage, keys: list[str]) -> tuple[threading.Thread, list[Any]]:
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(storage.batch_set_v1(keys, indices(0, len(keys))))
        except Exception as error:  # a write into a closed store
            results.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def test_closing_waits_for_a_write_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keeper = make_backend(tmp_path)
    writer = make_backend(tmp_path, io_threads=1)
    started, release = block_writes(monkeypatch)
    key = kit.random_keys(1)
    thread, results = write_in_thread(writer, key)
    assert started.wait(30)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    writer.close()  # returns once the write is done ...
    assert keeper.batch_exists_each(key) == [True]  # ... and committed
    thread.join(30)
    assert results == [[True]] and writer.get_stats().get("last_fault") is None
    keeper.clear()
    keeper.close()
    assert names(tmp_path) == []


def test_closing_with_a_write_abandoned_gives_its_slots_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "CLOSE_WAIT_S", 0.1)
    writer = make_backend(tmp_path, io_threads=1)
    started, release = block_writes(monkeypatch, fail=True)
    thread, results = write_in_thread(writer, kit.random_keys(1))
    assert started.wait(30)
    assert the_store(writer).opened.index.claim_count() == 1
    writer.close()  # waits 0.1 s, then gives the write's slots back: the store holds nothing and goes
    assert "writes still in flight" in (writer.get_stats().get("last_fault") or "")
    assert names(tmp_path) == []
    release.set()
    thread.join(30)
    assert results and results[0] != [True]  # never acknowledged


def test_closing_one_instance_leaves_anothers_writes_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    idle = make_backend(tmp_path)
    writer = make_backend(tmp_path, io_threads=1)  # the same store, and the same index, in this process
    started, release = block_writes(monkeypatch)
    key = kit.random_keys(1)
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(writer.batch_set_v1(key, indices(0, 1))))
    thread.start()
    assert started.wait(30)
    idle.close()
    release.set()
    thread.join(30)
    assert results == [[True]] and writer.stats.get("write_races") == 0
    assert writer.batch_get_v1(key, indices(4, 1)) == [True]
    writer.clear()
    writer.close()
    assert names(tmp_path) == []


# ----------------------------------------------------------------------------- claims of writers that died
def test_claims_of_a_writer_that_died_are_taken_back(tmp_path: Path, clock: Clock) -> None:
    storage = make_backend(tmp_path)
    index = the_store(storage).opened.index
    doomed = [(os.urandom(16), 1024, 1) for _ in range(3)]
    index.stage(doomed, "", quota=None, sweep=False)  # claimed, never committed: as by a process killed
    assert index.claim_count() == 3
    other = make_backend(tmp_path)  # a new instance sweeps on its first write
    assert other.batch_set_v1(kit.random_keys(1), indices(0, 1)) == [True]
    assert other.stats.get("claims_taken_back") == 0 and index.claim_count() == 3  # not 60 s old yet
    clock.advance(61)
    late = make_backend(tmp_path)
    assert late.batch_set_v1(kit.random_keys(1), indices(0, 1)) == [True]
    assert late.stats.get("claims_taken_back") == 3 and index.claim_count() == 0
    for instance in (storage, other, late):
        instance.clear()
        instance.close()
    assert names(tmp_path) == []
