"""A store's files: creation (state last, nothing left when it fails), reuse, re-creation, files of an
earlier layout, removal at close, and the index reset after a host restart without a clean close."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab import SlabBackend, store_files
from slab_support import MIB, STORE_FILES, indices, make_backend, make_pool, names, slab_backend, the_store

from hicache_storage import ConfigError, HiCacheStorage, make_config
from hicache_storage import testing as kit


def state_of(root: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((root / "slab.state").read_text())
    return result


def unregistered(root: Path, **options: Any) -> HiCacheStorage:
    extra = {"path": str(root), "resilience": False, "capacity_bytes": 8 * MIB, "manifests": False, **options}
    return HiCacheStorage(SlabBackend, make_config("m", extra_config=extra))


# ----------------------------------------------------------------------------- creation
def test_creation_writes_the_state_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    real = store_files._write_state

    def record(root: str, state: dict[str, Any], *, durable: bool) -> None:
        seen.append(names(Path(root)))
        real(root, state, durable=durable)

    monkeypatch.setattr(store_files, "_write_state", record)
    storage = make_backend(tmp_path, file_bytes=MIB)  # regions of 512 KiB, two to a data file
    files = the_store(storage).geometry.files
    assert files > 2
    data = [f"slab.data-{i}" for i in range(files)]
    assert seen[0] == sorted([*data, "slab.lock"])  # every data file whole, no index, no state yet
    assert names(tmp_path) == sorted([*data, "slab.index", "slab.index-lock", "slab.lock", "slab.state"])
    state = state_of(tmp_path)
    assert state["layout"] == 3 and state["clean"] is False and state["fresh"] is False
    assert state["shape"] == {"capacity_bytes": 8 * MIB, "region_bytes": MIB, "file_bytes": MIB, "index_bytes": None}
    assert storage.stats.get("stores_created") == 1
    storage.close()


def test_the_remains_of_a_failed_creation_are_replaced(tmp_path: Path) -> None:
    (tmp_path / "slab.data-0").write_bytes(b"half")  # files without slab.state: a creation that failed
    (tmp_path / "slab.data-7").write_bytes(b"more")
    (tmp_path / "slab.index").write_bytes(b"junk")
    storage = make_backend(tmp_path)
    assert names(tmp_path) == STORE_FILES and storage.stats.get("stores_created") == 1
    assert (tmp_path / "slab.data-0").stat().st_size == the_store(storage).geometry.data_bytes
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    storage.clear()
    storage.close()
    assert names(tmp_path) == []


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """``RLIMIT_FSIZE`` of this process lowered to ``limit`` (``SIGXFSZ`` ignored: a write past it is EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_preallocation_past_the_file_size_limit_is_a_config_error(tmp_path: Path) -> None:
    storage = unregistered(tmp_path)
    with file_size_limit(4 * MIB), pytest.raises(ConfigError) as caught:  # the data file is 5.5 MiB
        storage.register_mem_pool_host(make_pool())
    assert caught.value.option == "extra_config.capacity_bytes"
    assert "free space" in str(caught.value) and "File too large" in str(caught.value)
    assert names(tmp_path) == []  # every file it made is gone
    storage.close()


def test_a_disk_full_part_way_removes_every_file_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.posix_fallocate
    calls: list[int] = []

    def fill_up(fd: int, offset: int, length: int) -> None:
        calls.append(length)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fill_up)
    storage = unregistered(tmp_path, file_bytes=MIB)
    with pytest.raises(ConfigError) as caught:
        storage.register_mem_pool_host(make_pool())
    assert len(calls) == 3  # two data files were whole when the third failed
    assert caught.value.option == "extra_config.capacity_bytes"
    assert "No space left" in str(caught.value) and "free space:" in str(caught.value)
    assert names(tmp_path) == []
    storage.close()


def test_a_file_system_without_fallocate_gets_sparse_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(*_args: object) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    storage = make_backend(tmp_path)
    assert storage.stats.get("fallocate_unsupported") == 1
    assert (tmp_path / "slab.data-0").stat().st_size == the_store(storage).geometry.data_bytes
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert storage.batch_get_v1(keys, indices(4, 2)) == [True, True]
    storage.clear()
    storage.close()


def test_zero_fill_writes_the_new_store_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    real = os.pwrite

    def count(fd: int, data: Any, offset: int) -> int:
        written.append(len(data))
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", count)
    storage = make_backend(tmp_path, zero_fill=True)
    assert sum(written) == the_store(storage).geometry.data_bytes
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    storage.close()
    written.clear()
    again = make_backend(tmp_path, zero_fill=True)  # an existing store is kept as it is
    assert written == [] and again.stats.get("stores_created") == 0 and again.batch_exists_each(keys) == [True] * 2
    again.clear()
    again.close()


def test_data_files_are_read_without_readahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((fd, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    storage = make_backend(tmp_path, file_bytes=MIB)
    files = slab_backend(storage).data_files()
    assert len(files) == the_store(storage).geometry.files > 2
    assert {file.fd for file in files} <= {fd for fd, advice in advised if advice == os.POSIX_FADV_RANDOM}
    storage.close()


# ----------------------------------------------------------------------------- an earlier layout
def test_files_of_an_earlier_layout_are_refused_with_what_to_do(tmp_path: Path) -> None:
    old = ["hc1-0123456789abcdef.slab-0", "hc1-0123456789abcdef.slab-1", "hc1-0123456789abcdef.slab.lock"]
    for name in old:
        (tmp_path / name).write_bytes(b"old")
    with pytest.raises(ConfigError) as caught:
        make_backend(tmp_path)
    assert caught.value.option == "extra_config.path"
    message = str(caught.value)
    assert "earlier layout" in message and f"rm {tmp_path}/*slab-* {tmp_path}/*slab.lock" in message
    assert names(tmp_path) == sorted(old)  # refused, not removed
    cleaner = unregistered(tmp_path)
    cleaner.clear(everything=True)  # every page below the path: the old files go too
    cleaner.close()
    assert names(tmp_path) == []
    fresh = make_backend(tmp_path)
    assert fresh.batch_set_v1(kit.random_keys(2), indices(0, 2)) == [True, True]
    fresh.clear()
    fresh.close()


# ----------------------------------------------------------------------------- other options
def test_other_options_while_another_instance_has_the_store_open(tmp_path: Path) -> None:
    first = make_backend(tmp_path)
    keys = kit.random_keys(2)
    assert first.batch_set_v1(keys, indices(0, 2)) == [True, True]
    with pytest.raises(ConfigError) as caught:
        make_backend(tmp_path, capacity_bytes=16 * MIB)
    assert caught.value.option == "extra_config.capacity_bytes"
    assert f"capacity_bytes={8 * MIB}" in str(caught.value) and "another process has it open" in str(caught.value)
    assert first.batch_exists_each(keys) == [True, True]  # untouched
    first.clear()
    first.close()


def test_other_options_re_create_an_unused_store(tmp_path: Path) -> None:
    first = make_backend(tmp_path)
    keys = kit.random_keys(2)
    assert first.batch_set_v1(keys, indices(0, 2)) == [True, True]
    first.close()
    store_id = state_of(tmp_path)["store_id"]
    larger = make_backend(tmp_path, capacity_bytes=16 * MIB)
    assert larger.stats.get("stores_created") == 1 and larger.batch_exists_each(keys) == [False, False]
    assert state_of(tmp_path)["shape"]["capacity_bytes"] == 16 * MIB and state_of(tmp_path)["store_id"] != store_id
    assert (tmp_path / "slab.data-0").stat().st_size == the_store(larger).geometry.data_bytes
    larger.close()
    assert names(tmp_path) == []


@pytest.mark.parametrize("damage", ["state", "data"])
def test_a_damaged_store_is_re_created(tmp_path: Path, damage: str) -> None:
    first = make_backend(tmp_path)
    keys = kit.random_keys(2)
    assert first.batch_set_v1(keys, indices(0, 2)) == [True, True]
    first.close()
    if damage == "state":
        (tmp_path / "slab.state").write_text("{not json")
    else:
        os.truncate(tmp_path / "slab.data-0", MIB)  # shorter than the geometry says
    again = make_backend(tmp_path)
    assert again.stats.get("stores_created") == 1 and again.batch_exists_each(keys) == [False, False]
    again.close()
    assert names(tmp_path) == []


# ----------------------------------------------------------------------------- closing
def test_an_empty_store_is_removed_by_its_last_user(tmp_path: Path) -> None:
    first, second = make_backend(tmp_path), make_backend(tmp_path)  # the same store, open twice
    keys = kit.random_keys(3)
    assert first.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert first.delete(keys) == [True] * 3
    first.close()
    assert names(tmp_path) == STORE_FILES  # still open in ``second``
    second.close()
    assert names(tmp_path) == []  # files and lock file gone


def test_a_store_holding_pages_is_kept_and_marked_clean(tmp_path: Path) -> None:
    storage = make_backend(tmp_path)
    keys = kit.random_keys(3)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert state_of(tmp_path)["clean"] is False  # open
    storage.close()
    assert names(tmp_path) == STORE_FILES and state_of(tmp_path)["clean"] is True
    again = make_backend(tmp_path)
    assert again.batch_exists_each(keys) == [True] * 3 and again.stats.get("index_resets") == 0
    assert state_of(tmp_path)["clean"] is False
    again.clear()
    again.close()
    assert names(tmp_path) == []


@pytest.mark.parametrize(("clean", "fsync", "kept"), [(False, False, False), (True, False, True), (False, True, True)])
def test_a_host_restart_resets_an_index_not_closed_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean: bool, fsync: bool, kept: bool
) -> None:
    storage = make_backend(tmp_path, fsync=fsync)
    keys = kit.random_keys(3)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    storage.close()
    state = state_of(tmp_path)
    (tmp_path / "slab.state").write_text(json.dumps({**state, "clean": clean}))  # clean=False: as after a crash
    again = make_backend(tmp_path, fsync=fsync)  # the same boot: the index is trusted
    assert again.batch_exists_each(keys) == [True] * 3 and again.stats.get("index_resets") == 0
    again.close()
    (tmp_path / "slab.state").write_text(json.dumps({**state, "clean": clean}))
    monkeypatch.setattr(store_files, "_boot_id", lambda: "another-boot")
    after = make_backend(tmp_path, fsync=fsync)
    assert after.batch_exists_each(keys) == [kept] * 3
    assert after.stats.get("index_resets") == (0 if kept else 1) and after.stats.get("stores_created") == 0
    assert state_of(tmp_path)["boot_id"] == "another-boot"
    after.clear()
    after.close()
    assert names(tmp_path) == []


def test_operator_calls_never_create_a_store(tmp_path: Path) -> None:
    storage = unregistered(tmp_path)
    backend = slab_backend(storage)
    assert backend.store(create=False) is None and backend.data_files() == []
    assert storage.list_pages().pages == []
    assert names(tmp_path) == []
    storage.close()
