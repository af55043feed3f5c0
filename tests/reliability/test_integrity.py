"""Records bound to their keys and authenticated; hostile files at page paths; per-page writes;
read-only roots; clear scoped to the caller's key space; write faults that never cost reads.

A valid record copied or linked under another key must read as a miss (its header names the key it
was written under), on every byte backend and on Mooncake. With an integrity secret, a record made
by anyone without the secret reads as a miss too.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rel_support import (
    PAGE_SIZE,
    PrivateServices,
    Workload,
    assert_clean,
    make_keys,
    make_pool,
    open_mooncake,
    page_content,
)

from hicache_storage import ConfigError, HiCacheStorage, UnsupportedOperation, load_backend, make_config
from hicache_storage.plugin.page_format import encode_record

pytestmark = pytest.mark.timeout(120)

SECRET = "tenant-secret-" + secrets.token_hex(16)
ACCESS_KEY, SECRET_KEY = "AKIAINTEGRITYTEST001", "integrity-secret-" + "z" * 23


# --------------------------------------------------------------------------- backends under test
def _file(root: Path, **extra: Any) -> HiCacheStorage:
    from hicache_storage_file import FileBackend

    return load_backend(FileBackend, make_config("m", extra_config={"path": str(root), **extra}))


def _s3_bucket(services: PrivateServices | None) -> str:
    import boto3

    assert services is not None, "s3 needs the private servers"
    services.ctl("start", "s3")
    bucket = f"int-{secrets.token_hex(4)}"
    client = boto3.client(
        "s3",
        endpoint_url=services.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    client.create_bucket(Bucket=bucket)
    client.close()
    return bucket


def open_byte_backend(kind: str, services: PrivateServices | None, tmp_path: Path, **extra: Any) -> HiCacheStorage:
    """A byte backend of ``kind`` on a private server (``services``) or directory, with a registered pool."""
    backend: HiCacheStorage
    if kind == "file":
        backend = _file(tmp_path / "store", **extra)
    elif kind == "sim":
        from hicache_storage_sim import SimBackend

        backend = load_backend(SimBackend, make_config("m", extra_config={"store": f"int-{tmp_path.name}", **extra}))
    elif kind == "redis":
        from hicache_storage_redis import RedisBackend

        assert services is not None, "redis needs the private servers"
        services.ctl("start", "redis")
        options = {"url": services.redis_url, "key_prefix": f"int{secrets.token_hex(3)}:", **extra}
        backend = load_backend(RedisBackend, make_config("m", extra_config=options))
    elif kind == "s3":
        from hicache_storage_s3 import S3Backend

        bucket = _s3_bucket(services)
        assert services is not None
        options = {
            "bucket": bucket,
            "endpoint_url": services.s3_endpoint,
            "region": "us-east-1",
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            **extra,
        }
        backend = load_backend(S3Backend, make_config("m", extra_config=options))
    else:
        from hicache_storage_fsspec import FsspecBackend

        store = kind.split("-", 1)[1]
        if store == "memory":
            url: str = f"memory://int-{secrets.token_hex(4)}"
            storage: dict[str, Any] = {}
        elif store == "local":
            url, storage = f"file://{tmp_path}/fs", {}
        else:
            url = f"s3://{_s3_bucket(services)}/cache"
            assert services is not None
            storage = {"key": ACCESS_KEY, "secret": SECRET_KEY, "endpoint_url": services.s3_endpoint}
        backend = load_backend(
            FsspecBackend, make_config("m", extra_config={"url": url, "storage_options": storage, **extra})
        )
    backend.register_mem_pool_host(make_pool())
    return backend


BYTE_BACKENDS = ["file", "sim", "redis", "s3", "fsspec-memory", "fsspec-local", "fsspec-s3"]


def _needs(kind: str) -> None:
    module = {"file": "hicache_storage_file", "sim": "hicache_storage_sim", "redis": "hicache_storage_redis"}
    pytest.importorskip(module.get(kind, "hicache_storage_s3" if kind == "s3" else "hicache_storage_fsspec"))


def _path(backend: HiCacheStorage, storage_key: str) -> Path:
    """The page file of ``storage_key`` in a file or local fsspec store."""
    from hicache_storage_file import FileBackend
    from hicache_storage_file.conformance import FileHooks

    inner = backend.backend
    if isinstance(inner, FileBackend):
        return FileHooks.path_for(inner, storage_key)
    return Path(inner.path_for(storage_key))  # type: ignore[attr-defined]


def _raw(backend: HiCacheStorage, kind: str) -> Any:
    """The stored records of a byte backend by storage key (its conformance hooks' side channel)."""
    from hicache_storage_conformance.hooks import find_hooks

    hooks, _source = find_hooks(kind.partition("-")[0])
    return hooks.raw_store(backend.backend)


def _planter(backend: HiCacheStorage, kind: str) -> Callable[[str, str], None]:
    """``plant(source, target)``: put the stored record of storage key ``source`` under ``target``."""
    if kind == "file":

        def copy(source: str, target: str) -> None:
            path = _path(backend, target)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_path(backend, source), path)

        return copy
    raw = _raw(backend, kind)

    def plant(source: str, target: str) -> None:
        raw[target] = raw[source]

    return plant


def check_copied_record_misses(backend: HiCacheStorage, plant: Callable[[str, str], None]) -> None:
    """Write page A, put its record under key B: B is a counted miss, A still reads right."""
    workload = Workload(backend, backend.mem_pool_host, batch=2, universe=4)
    key_a, key_b = workload.keys[:2]
    assert workload._write([key_a]) == 1
    space = backend.keyspace
    assert space is not None
    plant(space.storage_key(key_a), space.storage_key(key_b))
    before = backend.stats.get("integrity_failures")
    assert workload._read([key_b]) == 0, "a record copied from another key was served as a hit"
    assert backend.stats.get("integrity_failures") == before + 1
    assert workload._read([key_a]) == 1
    assert_clean(workload)


# --------------------------------------------------------------------------- binding
@pytest.mark.services
@pytest.mark.parametrize("kind", BYTE_BACKENDS)
def test_record_copied_under_another_key_is_a_miss(services: PrivateServices, tmp_path: Path, kind: str) -> None:
    _needs(kind)
    backend = open_byte_backend(kind, services, tmp_path)
    try:
        check_copied_record_misses(backend, _planter(backend, kind))
    finally:
        backend.clear()
        backend.close()


def test_file_record_symlinked_under_another_key_is_a_miss(tmp_path: Path) -> None:
    pytest.importorskip("hicache_storage_file")
    backend = _file(tmp_path / "store")
    backend.register_mem_pool_host(make_pool())

    def link(source: str, target: str) -> None:
        path = _path(backend, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(_path(backend, source), path)

    check_copied_record_misses(backend, link)
    backend.close()


@pytest.mark.services
def test_mooncake_object_copied_under_another_key_is_a_miss(services: PrivateServices) -> None:
    pytest.importorskip("hicache_storage_mooncake")
    backend = open_mooncake(services, "int")
    try:
        check_copied_record_misses(backend, _planter(backend, "mooncake"))
        assert backend.stats.get("mooncake_key_mismatch") >= 1
    finally:
        backend.close()


# --------------------------------------------------------------------------- authentication
@pytest.mark.services
@pytest.mark.parametrize("kind", ["file", "sim", "redis", "s3", "fsspec-memory"])
def test_records_planted_without_the_secret_are_misses(
    services: PrivateServices, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    _needs(kind)
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("HC_TENANT_SECRET", SECRET)
    shared = {"store": "int-auth-" + tmp_path.name} if kind == "sim" else {}
    backend = open_byte_backend(kind, services, tmp_path, integrity_secret_env="HC_TENANT_SECRET", **shared)
    try:
        workload = Workload(backend, backend.mem_pool_host, batch=4, universe=8)
        keys = workload.keys[:4]
        assert workload._write(keys) == 4
        assert workload._read(keys) == 4, backend.get_stats()["last_fault"]
        space = backend.keyspace
        assert space is not None
        # a party without the secret writes a well-formed record for the right key: refused
        forged_key = workload.keys[4]
        forged = encode_record(
            [page_content(forged_key, 0, backend.mem_pool_host.bytes_per_page)], space.storage_key(forged_key)
        )
        if kind == "file":
            path = _path(backend, space.storage_key(forged_key))
            path.parent.mkdir(parents=True, exist_ok=True)
            page, header = forged[56:], forged[:56]
            path.write_bytes(page + header)  # the file backend keeps the header as a trailer
        else:
            _raw(backend, kind)[space.storage_key(forged_key)] = forged
        before = backend.stats.get("integrity_failures")
        assert workload._read([forged_key]) == 0, "a record made without the secret was served"
        assert backend.stats.get("integrity_failures") == before + 1
        # the secret shows nowhere
        texts = [repr(backend), str(backend), repr(backend.options), str(backend.get_stats()), caplog.text]
        assert all(SECRET not in text for text in texts)
        assert_clean(workload)
    finally:
        backend.clear()
        backend.close()


def test_reader_without_the_secret_still_checks_authenticated_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turning the secret on for writers first keeps readers without it serving (they check the rest)."""
    pytest.importorskip("hicache_storage_file")
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    writer = _file(tmp_path / "store", integrity_secret_file=str(secret_file))
    plain = _file(tmp_path / "store")
    for backend in (writer, plain):
        backend.register_mem_pool_host(make_pool())
    workload = Workload(writer, writer.mem_pool_host, batch=4, universe=8)
    keys = workload.keys[:4]
    assert workload._write(keys) == 4
    reader = Workload(plain, plain.mem_pool_host, batch=4, universe=8)
    reader.keys = workload.keys
    assert reader._read(keys) == 4
    # the reverse is refused: a secret-holding reader never accepts an unauthenticated record
    assert reader._write(workload.keys[4:6]) == 2
    assert workload._read(workload.keys[4:6]) == 0
    for backend in (writer, plain):
        backend.close()


def test_bad_secret_options_fail_construction_without_showing_the_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("hicache_storage_file")
    monkeypatch.setenv("HC_SHORT_SECRET", "short")
    cases = {
        "extra_config.integrity_secret_env": {"integrity_secret_env": "HC_SHORT_SECRET"},
        "extra_config.integrity_secret_file": {"integrity_secret_file": str(tmp_path / "missing")},
    }
    for option, extra in cases.items():
        with pytest.raises(ConfigError) as caught:
            _file(tmp_path / "store", **extra)
        assert caught.value.option == option
        assert "short" not in str(caught.value).replace("HC_SHORT_SECRET", "")


# --------------------------------------------------------------------------- hostile files at page paths
def _bounded(call: Callable[[], Any], seconds: float = 5.0) -> Any:
    """``call()`` on a thread; fails the test (instead of hanging it) when it takes longer than ``seconds``."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the call blocked for more than {seconds} s")
    return result[0]


@pytest.mark.parametrize("kind", ["file", "fsspec-local"])
@pytest.mark.parametrize("what", ["fifo", "symlink to a foreign file", "directory"])
def test_non_regular_files_at_page_paths_are_misses(tmp_path: Path, kind: str, what: str) -> None:
    _needs(kind)
    backend = open_byte_backend(kind, None, tmp_path)
    try:
        workload = Workload(backend, backend.mem_pool_host, batch=2, universe=4)
        good, bad = workload.keys[:2]
        assert workload._write([good]) == 1
        space = backend.keyspace
        assert space is not None
        path = _path(backend, space.storage_key(bad))
        path.parent.mkdir(parents=True, exist_ok=True)
        if what == "fifo":
            os.mkfifo(path)
        elif what == "directory":
            path.mkdir()
        else:
            foreign = tmp_path / "foreign"
            foreign.write_bytes(b"\0" * (backend.mem_pool_host.bytes_per_page + 56))
            os.symlink(foreign, path)
        begin = time.monotonic()
        assert _bounded(lambda: workload._read([bad, good])) == 1, "only the real page may hit"
        assert _bounded(lambda: backend.batch_exists_each([bad, good])) == [False, True]
        assert time.monotonic() - begin < 2
        assert_clean(workload)
    finally:
        backend.close()


# --------------------------------------------------------------------------- file: per-page writes, read-only, clear
def test_one_failing_page_does_not_fail_the_batch(tmp_path: Path) -> None:
    pytest.importorskip("hicache_storage_file")
    backend = _file(tmp_path / "store", resilience={"retries": 0})
    backend.register_mem_pool_host(make_pool())
    workload = Workload(backend, backend.mem_pool_host, batch=3, universe=6)
    keys = workload.keys[:3]
    space = backend.keyspace
    assert space is not None
    blocked = _path(backend, space.storage_key(keys[1]))
    blocked.mkdir(parents=True)  # a directory where the page file goes: its rename fails
    indices = backend.mem_pool_host.alloc(3 * PAGE_SIZE)
    assert backend.batch_set_v1(keys, indices) == [True, False, True]
    assert backend.stats.get("key_faults") == 1
    backend.mem_pool_host.free(indices)
    assert backend.batch_exists_each(keys) == [True, False, True]
    backend.close()


def test_read_only_backend_serves_and_never_writes(tmp_path: Path) -> None:
    pytest.importorskip("hicache_storage_file")
    root = tmp_path / "store"
    writer = _file(root)
    writer.register_mem_pool_host(make_pool())
    written = Workload(writer, writer.mem_pool_host, batch=4, universe=8)
    assert written._write(written.keys[:4]) == 4
    reader = _file(root, read_only=True)
    reader.register_mem_pool_host(make_pool())
    assert not reader.capabilities.supports_delete and not reader.capabilities.supports_clear
    before = sorted(p.name for p in root.rglob("*"))
    work = Workload(reader, reader.mem_pool_host, batch=4, universe=8)
    work.keys = written.keys
    assert work._read(written.keys[:4]) == 4
    assert work._write(written.keys[4:8]) == 0
    assert reader.stats.get("read_only_writes_refused") == 4
    assert reader.get_stats()["faults"] == 0, "a refused write is not a fault: nothing was tried"
    with pytest.raises(UnsupportedOperation):
        reader.clear()
    with pytest.raises(UnsupportedOperation):
        reader.delete(written.keys[:1])
    assert sorted(p.name for p in root.rglob("*")) == before
    with pytest.raises(ConfigError, match="does not exist"):
        _file(tmp_path / "missing", read_only=True)
    with pytest.raises(ConfigError, match="read_only"):
        _file(root, read_only=True, max_bytes=1 << 20)
    assert_clean(work)
    writer.close()
    reader.close()


@pytest.mark.parametrize("kind", ["file", "sim", "fsspec-memory", "fsspec-local"])
def test_clear_removes_only_the_callers_key_space(tmp_path: Path, kind: str) -> None:
    _needs(kind)
    first = open_byte_backend(kind, None, tmp_path)
    name = "fsspec" if kind.startswith("fsspec") else kind
    # the same location (path, url or store name), another model: another key space
    other = load_backend(name, make_config("other-model", extra_config=dict(first.config.extra_config or {})))
    other.register_mem_pool_host(make_pool())
    keys = make_keys(3)
    indices = torch.arange(3 * PAGE_SIZE)
    assert first.batch_set_v1(keys, indices) == [True] * 3
    assert other.batch_set_v1(keys, indices) == [True] * 3
    first.clear()  # SGLang's call: no argument
    assert first.batch_exists_each(keys) == [False] * 3
    assert other.batch_exists_each(keys) == [True] * 3, "clear() removed another key space's pages"
    first.clear(everything=True)
    assert other.batch_exists_each(keys) == [False] * 3
    first.close()
    other.close()


# --------------------------------------------------------------------------- write faults never cost reads
def test_failed_writes_never_make_reads_of_intact_pages_miss(tmp_path: Path) -> None:
    """Five (and more) failed writes open the write breaker only: reads and exists keep hitting."""
    pytest.importorskip("hicache_storage_file")
    backend = _file(tmp_path / "store", resilience={"retries": 0, "breaker_threshold": 5, "breaker_reset_s": 30})
    backend.register_mem_pool_host(make_pool())
    workload = Workload(backend, backend.mem_pool_host, batch=8, universe=32)
    intact = workload.keys[:8]
    assert workload._write(intact) == 8

    def refuse(*_args: Any) -> list[bool]:
        raise OSError(30, "Read-only file system")

    backend.backend.write_pages = refuse  # type: ignore[method-assign]
    for round_number in range(8):
        assert workload._write(workload.keys[8 + round_number : 9 + round_number]) == 0
        assert workload._read(intact) == 8, f"reads missed after {round_number + 1} failed writes"
        assert backend.batch_exists_each(intact) == [True] * 8
    breakers = backend.get_stats()["resilience"]["breakers"]
    assert breakers["write"]["state"] == "open" and breakers["write"]["times_opened"] == 1
    assert breakers["read"]["state"] == "closed" and breakers["exists"]["state"] == "closed"
    assert backend.stats.get("short_circuited_read") == 0
    assert_clean(workload)
    backend.close()
