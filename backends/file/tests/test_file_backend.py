"""Tests of the file backend: its page file format, atomic publish, layout, options, eviction, processes.

Round trips, v0/v1 interchange, misses, persistence, truncated/corrupted/vanished pages, delete,
clear and loading through the entry point are the conformance suite's (``test_conformance.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hicache_storage_file import PATH_ENV, FileBackend
from hicache_storage_file.conformance import FileHooks
from hicache_storage_file.footprint import Footprint
from hicache_storage_file.layout import PageLayout

from hicache_storage import ConfigError, HiCacheStorage, HostKVPool, make_config
from hicache_storage import testing as kit
from hicache_storage.plugin.page_format import HEADER_SIZE, MAGIC, encode_header, encode_record

PAGE_SIZE = 4


def keys_for(count: int, salt: str = "") -> list[str]:
    """The same ``count`` and ``salt`` give the same keys."""
    return kit.random_keys(count, salt)


def make_pool(
    *, is_mla: bool = False, layout: str = "page_first", dtype: str = "bfloat16", num_pages: int = 8
) -> HostKVPool:
    return kit.make_pool(layout, is_mla, num_pages, dtype=dtype, seed=7)


def make_backend(root: Path, pool: HostKVPool | None = None, **options: Any) -> HiCacheStorage:
    return kit.make_backend(
        FileBackend, {"path": str(root), "resilience": False, **options}, pool if pool is not None else make_pool()
    )


def open_files(root: Path | str, **options: Any) -> FileBackend:
    """The file backend itself (no pool registered), for calling its primitives."""
    storage = HiCacheStorage(FileBackend, make_config("m", extra_config={"path": str(root), **options}))
    return file_backend(storage)


def file_backend(storage: HiCacheStorage) -> FileBackend:
    backend = storage.backend
    assert isinstance(backend, FileBackend)
    return backend


def path_of(storage: HiCacheStorage, key: str) -> Path:
    """The page file of the page hash ``key``."""
    assert storage.keyspace is not None
    return FileHooks.path_for(file_backend(storage), storage.keyspace.storage_key(key))


indices = kit.page_indices
page_bytes = kit.page_bytes


# ----------------------------------------------------------------------------- page files
def test_v0_and_v1_writes_store_the_same_payload(tmp_path: Path) -> None:
    pool = make_pool(layout="layer_first")
    backend = make_backend(tmp_path, pool)
    v0_keys, v1_keys = keys_for(2, "v0"), keys_for(2, "v1")
    flat = [pool.get_data_page(p * PAGE_SIZE) for p in range(2)]
    assert backend.batch_set(v0_keys, flat) is True
    assert backend.batch_set_v1(v1_keys, indices(0, 2)) == [True, True]
    for k0, k1 in zip(v0_keys, v1_keys):
        stored_v0 = path_of(backend, k0).read_bytes()
        stored_v1 = path_of(backend, k1).read_bytes()
        assert stored_v0[:-HEADER_SIZE] == stored_v1[:-HEADER_SIZE]  # same payload; each trailer names its key
        assert stored_v0[-HEADER_SIZE:] != stored_v1[-HEADER_SIZE:]


# ----------------------------------------------------------------------------- integrity
def _damage_extend(data: bytes) -> bytes:
    return data + b"\0"


def _damage_magic(data: bytes) -> bytes:
    return data[:-HEADER_SIZE] + b"XXXX" + data[-HEADER_SIZE + 4 :]


def _damage_length(data: bytes) -> bytes:
    trailer = bytearray(data[-HEADER_SIZE:])
    trailer[8] ^= 0x01  # payload length field
    return data[:-HEADER_SIZE] + bytes(trailer)


def _damage_no_trailer(data: bytes) -> bytes:
    return data[:-HEADER_SIZE]


def _damage_empty(data: bytes) -> bytes:
    return b""


@pytest.mark.parametrize(
    "damage",
    [
        _damage_extend,
        _damage_magic,
        _damage_length,
        _damage_no_trailer,
        _damage_empty,
    ],
)
def test_damaged_trailer_reads_as_miss_and_is_counted(tmp_path: Path, damage: Any) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool)
    key = keys_for(1)
    assert backend.batch_set_v1(key, indices(0, 1)) == [True]
    path = path_of(backend, key[0])
    path.write_bytes(damage(path.read_bytes()))
    assert backend.batch_get_v1(key, indices(1, 1)) == [False]
    assert backend.stats.get("integrity_failures") == 1
    assert backend.get_stats()["counters"]["integrity_failures"] == 1


def test_page_file_is_payload_then_trailer(tmp_path: Path) -> None:
    pool = make_pool(layout="layer_first")
    backend = make_backend(tmp_path, pool)
    key = keys_for(1)
    backend.batch_set_v1(key, indices(0, 1))
    assert backend.keyspace is not None
    storage_key = backend.keyspace.storage_key(key[0])
    data = path_of(backend, key[0]).read_bytes()
    payload = page_bytes(pool, 0)
    assert data == payload + encode_header([payload], storage_key)
    assert data[-HEADER_SIZE:].startswith(MAGIC)


def test_exists_checks_the_stored_size(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    key = keys_for(1)
    backend.batch_set_v1(key, indices(0, 1))
    assert backend.keyspace is not None
    path = path_of(backend, key[0])
    assert path.stat().st_size == HEADER_SIZE + backend.keyspace.page_bytes
    path.write_bytes(path.read_bytes()[:-10])
    assert backend.batch_exists_each(key) == [False]


# ----------------------------------------------------------------------------- atomic publish
def test_temp_files_are_never_pages(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool)
    key = keys_for(1)[0]
    final = path_of(backend, key)
    # A complete record left under a temp name (a writer died before its rename).
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.parent / PageLayout.temp_name(final.name, "12345-dead-0")
    temp.write_bytes(encode_record(pool.page_segments(0)))
    assert backend.batch_exists_each([key]) == [False]
    assert backend.batch_get_v1([key], indices(1, 1)) == [False]
    assert backend.batch_set_v1([key], indices(0, 1)) == [True]
    leftovers = [p.name for p in final.parent.iterdir() if p.name != final.name and p != temp]
    assert leftovers == []
    backend.clear()
    assert not temp.exists() and not final.exists()


def test_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    backend = open_files(tmp_path)
    storage_key = "hc1-0000.pagekey.tp0of1"
    page = [memoryview(bytearray(64))]
    target = FileHooks.path_for(backend, storage_key)
    target.parent.mkdir(parents=True)
    target.mkdir()  # a directory where the page file should go: os.replace fails
    with pytest.raises(OSError):
        backend.write_pages([storage_key], [page], kit.plain_context(64))
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_temp_file_that_could_not_be_removed_goes_with_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system turns read-only between a page's write and its rename (the unlink of the temp
    file fails too); the next write, once it is writable again, removes the temp file."""
    backend = open_files(tmp_path)
    keys = ["hc1-0000.first.tp0of1", "hc1-0000.second.tp0of1"]
    page = [memoryview(bytearray(64))]
    real_replace, real_unlink = os.replace, os.unlink

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)
    monkeypatch.setattr(os, "unlink", read_only)
    with pytest.raises(OSError):
        backend.write_pages(keys[:1], [page], kit.plain_context(64))
    left = [p for p, is_temp in backend.layout.iter_owned_files() if is_temp]
    assert len(left) == 1
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert backend.write_pages(keys[1:], [page], kit.plain_context(64)) == [True]
    assert [p for p, is_temp in backend.layout.iter_owned_files() if is_temp] == []
    assert backend.pages_exist(keys, kit.plain_context(64)) == [False, True]


# ----------------------------------------------------------------------------- layout and permissions
@pytest.mark.parametrize("levels", [0, 1, 2, 3])
def test_fanout_directories_follow_the_key_hash(tmp_path: Path, levels: int) -> None:
    backend = open_files(tmp_path, fanout_levels=levels)
    storage_key = "hc1-abc.somekey.tp0of1"
    digest = xxhash.xxh3_64_hexdigest(storage_key.encode())
    expected = tmp_path.joinpath(*[digest[2 * i : 2 * i + 2] for i in range(levels)], storage_key)
    assert FileHooks.path_for(backend, storage_key) == expected


def test_long_keys_get_bounded_unique_file_names(tmp_path: Path) -> None:
    backend = open_files(tmp_path)
    long_a, long_b = "k" * 250 + "a", "k" * 250 + "b"
    name_a, name_b = FileHooks.path_for(backend, long_a).name, FileHooks.path_for(backend, long_b).name
    assert name_a != name_b and len(name_a) < 200 and len(name_b) < 200
    page = [memoryview(bytearray(b"x" * 100))]
    assert backend.write_pages([long_a], [page], kit.plain_context(100)) == [True]
    out = [memoryview(bytearray(100))]
    assert backend.read_pages([long_a], [out], kit.plain_context(100)) == [True]
    assert bytes(out[0]) == b"x" * 100
    assert backend.read_pages([long_b], [out], kit.plain_context(100)) == [False]


def test_directories_are_0700_and_files_0600(tmp_path: Path) -> None:
    root = tmp_path / "new" / "root"
    backend = make_backend(root)
    key = keys_for(1)
    backend.batch_set_v1(key, indices(0, 1))
    path = path_of(backend, key[0])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    directory = path.parent
    while directory != tmp_path:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        directory = directory.parent


# ----------------------------------------------------------------------------- delete, clear, eviction
def test_clear_removes_only_page_files(tmp_path: Path) -> None:
    backend = make_backend(tmp_path)
    keys = keys_for(3)
    backend.batch_set_v1(keys, indices(0, 3))
    fanout_dir = path_of(backend, keys[1]).parent
    foreign = [tmp_path / "notes.txt", fanout_dir / "README", tmp_path / "keep" / "hc1-0.page.tp0of1"]
    foreign[2].parent.mkdir()
    for path in foreign:
        path.write_bytes(MAGIC + b"not ours")
    backend.clear()
    assert backend.batch_exists_each(keys) == [False, False, False]
    assert not any(path_of(backend, key).exists() for key in keys)
    assert all(path.exists() for path in foreign)
    assert backend.get_stats()["faults"] == 0


def limit_for(root: Path, pool: HostKVPool, pages: int, directories: int = 0) -> int:
    """``max_bytes`` that holds ``pages`` page files of ``pool`` on disk (blocks, directory entries), the
    root and ``directories`` fan-out directories."""
    footprint = Footprint(str(root))
    key = "hc1-" + "0" * 20 + "." + "0" * 64 + ".tp0of1.pp0of1.cp0of1"
    page = footprint.page(HEADER_SIZE + pool.bytes_per_page) + footprint.entry(f"{root}/{key}")
    return (1 + directories) * footprint.directory + pages * page


def test_max_bytes_evicts_least_recently_written(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool, max_bytes=limit_for(tmp_path, pool, 3), manifests=False)
    assert backend.capabilities.may_evict is True
    keys = keys_for(5)
    for page, key in enumerate(keys):
        assert backend.batch_set_v1([key], indices(page, 1)) == [True]
    assert backend.batch_exists_each(keys) == [False, False, True, True, True]
    assert backend.stats.get("evictions") == 2
    # Rewriting the oldest survivor makes it the newest.
    backend.batch_set_v1(keys[2:3], indices(2, 1))
    backend.batch_set_v1(keys[:1], indices(0, 1))
    assert backend.batch_exists_each(keys) == [True, False, True, False, True]


def test_max_bytes_counts_pages_already_on_disk(tmp_path: Path) -> None:
    pool = make_pool()
    keys = keys_for(3)
    first = make_backend(tmp_path, pool, manifests=False)
    first.batch_set_v1(keys[:2], indices(0, 2))
    for age, key in enumerate(keys[:2]):
        os.utime(path_of(first, key), (1_000_000 + age, 1_000_000 + age))
    # the store has the unlimited default's fan-out level: each page may need a directory of its own
    limited = make_backend(tmp_path, pool, max_bytes=limit_for(tmp_path, pool, 2, directories=3), manifests=False)
    assert limited.batch_set_v1(keys[2:], indices(2, 1)) == [True]
    assert limited.batch_exists_each(keys) == [False, True, True]


def test_no_eviction_without_max_bytes(tmp_path: Path) -> None:
    assert make_backend(tmp_path).capabilities.may_evict is False
    assert FileBackend.capabilities.verifies_integrity and FileBackend.capabilities.zero_copy


# ----------------------------------------------------------------------------- options
def test_path_falls_back_to_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "from-env"))
    backend = file_backend(HiCacheStorage(FileBackend, make_config("m")))
    assert backend.root == tmp_path / "from-env"
    assert backend.root.is_dir()


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ({}, "extra_config.path"),
        ({"path": ""}, "extra_config.path"),
        ({"path": "/tmp/x", "fanout_levels": 9}, "extra_config.fanout_levels"),
        ({"path": "/tmp/x", "fanout_levels": "2"}, "extra_config.fanout_levels"),
        ({"path": "/tmp/x", "fsync": "yes"}, "extra_config.fsync"),
        ({"path": "/tmp/x", "max_bytes": 0}, "extra_config.max_bytes"),
        ({"path": "/tmp/x", "io_threads": 0}, "extra_config.io_threads"),
    ],
)
def test_bad_options_name_the_option(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], option: str) -> None:
    monkeypatch.delenv(PATH_ENV, raising=False)
    with pytest.raises(ConfigError) as info:
        HiCacheStorage(FileBackend, make_config("m", extra_config=extra))
    assert info.value.option == option


def test_path_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a directory") as info:
        HiCacheStorage(FileBackend, make_config("m", extra_config={"path": str(tmp_path / "f")}))
    assert info.value.option == "extra_config.path"


# ----------------------------------------------------------------------------- concurrency
_PAGE = 256 * 1024
_KEYS = [f"hc1-0.concurrent{i}.tp0of1" for i in range(6)]


def _writer(root: str, fill: int, rounds: int) -> None:
    backend = open_files(root, resilience=False)
    data = memoryview(bytearray([fill]) * _PAGE)
    pages = [[data[: _PAGE // 3], data[_PAGE // 3 :]] for _ in _KEYS]
    for _ in range(rounds):
        if not all(backend.write_pages(_KEYS, pages, kit.plain_context(_PAGE))):
            raise SystemExit(1)


def test_two_processes_writing_the_same_keys_never_tear(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    writers = [context.Process(target=_writer, args=(str(tmp_path), fill, 25)) for fill in (0xA1, 0xB2)]
    for proc in writers:
        proc.start()
    storage = HiCacheStorage(FileBackend, make_config("m", extra_config={"path": str(tmp_path), "resilience": False}))
    reader = file_backend(storage)
    buffers = [bytearray(_PAGE) for _ in _KEYS]
    hits = 0
    try:
        while any(proc.is_alive() for proc in writers) or hits == 0:
            results = reader.read_pages(_KEYS, [[memoryview(b)] for b in buffers], kit.plain_context(_PAGE))
            for hit, buffer in zip(results, buffers):
                if hit:
                    hits += 1
                    assert buffer.count(buffer[0]) == _PAGE and buffer[0] in (0xA1, 0xB2)
            if hits == 0 and not any(proc.is_alive() for proc in writers):
                break
    finally:
        for proc in writers:
            proc.join(timeout=60)
    assert [proc.exitcode for proc in writers] == [0, 0]
    assert hits > 0
    assert storage.stats.get("integrity_failures") == 0
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and PageLayout.is_temp_name(p.name)]
    assert leftovers == []
