"""File backend: read-only directory, full disk, damaged page files, two writer processes.

The tests run as root, so ``chmod`` cannot make a directory read-only for them. A read-only bind
mount of the storage root over itself does (``mount --bind`` then ``remount,ro,bind``), and a
size-limited tmpfs gives a real ``ENOSPC``. Both need ``mount`` (root, or a user namespace);
where it is unavailable those tests are skipped, and the full-disk case is also covered by the
backend's own ``max_bytes`` (``test_file_backend.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from file_mounts import can_mount, mount, umount
from hicache_storage_file import FileBackend
from hicache_storage_file.conformance import FileHooks
from hicache_storage_file.layout import PageLayout

from hicache_storage import ConfigError, HiCacheStorage, make_config
from hicache_storage.plugin.page_format import HEADER_SIZE
from hicache_storage.testing.fault_figures import record
from hicache_storage.testing.outage import (
    PAGE_SIZE,
    Workload,
    assert_clean,
    fault_phase,
    fill_page,
    make_keys,
    make_pool,
    race_writers,
)

pytestmark = pytest.mark.timeout(60)

RESILIENCE = {"deadline_s": 1.0, "retries": 1, "breaker_threshold": 5, "breaker_reset_s": 0.3}


def open_file(path: Path, **options: Any) -> tuple[HiCacheStorage, Any]:
    pool = make_pool()
    extra = {"path": str(path), "resilience": RESILIENCE, **options}
    backend = HiCacheStorage(FileBackend, make_config("rel-model", extra_config=extra))
    backend.register_mem_pool_host(pool)
    return backend, pool


needs_mount = pytest.mark.skipif(not can_mount(), reason="mount is not available (needs root)")


def temp_files(root: Path) -> list[str]:
    return [path for path, is_temp in PageLayout(str(root), 2).iter_owned_files() if is_temp]


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 256 KiB tmpfs (a real full disk: writes fail with ENOSPC)."""
    target = Path(tempfile.mkdtemp(prefix="hc-rel-full-"))
    mount("-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(target))
    try:
        yield target
    finally:
        umount(target)
        target.rmdir()


@needs_mount
def test_directory_made_read_only_mid_run(tmp_path: Path) -> None:
    root = tmp_path / "store"
    backend, pool = open_file(root)
    workload = Workload(backend, pool)
    mounted = threading.Event()

    def inject() -> None:
        mount("--bind", str(root), str(root))
        mounted.set()
        for attempt in range(50):  # EBUSY while a write is open on the mount: try again
            try:
                mount("-o", "remount,ro,bind", str(root))
                break
            except subprocess.CalledProcessError:
                if attempt == 49:
                    raise
                time.sleep(0.02)
        with pytest.raises(OSError):
            (root / "probe").write_bytes(b"x")  # root cannot write either: the fault is real

    def restore() -> None:
        umount(root)
        mounted.clear()

    try:
        timings = fault_phase(
            workload, healthy_s=0.5, inject=inject, outage_s=1.0, restore=restore, recover_timeout_s=10
        )
    finally:
        if mounted.is_set():
            umount(root)
        stats = backend.get_stats()
        backend.close()
    assert_clean(workload)
    assert timings["hits_before"] and timings["failed_sets_during"]
    assert stats["faults"] > 0 and "Read-only file system" in str(stats["last_fault"])
    assert timings["recovery_s"] is not None
    assert temp_files(root) == [], "a failed write left a temp file behind"
    record("file.read_only.recovery_s", timings["recovery_s"])


@needs_mount
def test_disk_full(small_fs: Path) -> None:
    backend, pool = open_file(small_fs, resilience={"retries": 0, "breaker_threshold": 0})
    keys = make_keys(400)
    workload = Workload(backend, pool, versions=(0,))
    try:
        stored: list[str] = []
        for begin in range(0, len(keys), 8):
            batch = keys[begin : begin + 8]
            ok = workload._call("set", lambda b=batch: backend.batch_set_each(b, [_flat(workload, k) for k in b]))
            stored += [k for k, flag in zip(batch, ok or [], strict=False) if flag]
        failed = len(keys) - len(stored)
        assert stored and failed, f"expected the 256 KiB disk to fill: stored {len(stored)} of {len(keys)}"
        assert "No space left" in str(backend.get_stats()["last_fault"])
        assert temp_files(small_fs) == [], "ENOSPC left partial temp files"
        # every page reported stored reads back intact; nothing reported stored is missing
        assert backend.batch_exists_each(stored) == [True] * len(stored)
        for begin in range(0, len(stored), 8):
            workload._read(stored[begin : begin + 8])
        assert workload.report.hits == len(stored) and workload.report.wrong_pages == 0
        # space freed: writes succeed again
        backend.delete(stored[: len(stored) // 2])
        assert backend.batch_set_each(keys[-4:], [_flat(workload, k) for k in keys[-4:]]) == [True] * 4
    finally:
        backend.close()
    assert_clean(workload)
    record("file.disk_full.pages_stored_in_256KiB", len(stored))


def _flat(workload: Workload, key: str) -> Any:
    import torch

    return torch.frombuffer(bytearray(workload.expected(key, 0)), dtype=torch.uint8).view(workload.pool.dtype)


def test_truncated_and_corrupted_pages_are_misses(tmp_path: Path) -> None:
    backend, pool = open_file(tmp_path / "store")
    workload = Workload(backend, pool)
    keys = make_keys(12)
    try:
        assert workload._write(keys) == len(keys)
        space = backend.keyspace
        assert space is not None
        paths = [FileHooks.path_for(backend.backend, space.storage_key(k)) for k in keys]
        size = paths[0].stat().st_size
        damage = {
            0: lambda p: os.truncate(p, size // 2),  # torn tail
            1: lambda p: os.truncate(p, 0),  # empty file
            2: lambda p: _flip(p, 10),  # payload bit flip
            3: lambda p: _flip(p, size - HEADER_SIZE + 17),  # trailer: checksum flip
            4: lambda p: p.write_bytes(p.read_bytes() + b"\0"),  # one byte too long
            5: lambda p: p.write_bytes(
                p.read_bytes()[: size - HEADER_SIZE] + b"HCKV" + bytes(HEADER_SIZE - 4)
            ),  # forged
        }
        for index, hurt in damage.items():
            hurt(paths[index])
        workload._read(keys)
        assert workload.report.hits == len(keys) - len(damage)
        assert workload.report.wrong_pages == 0
        exists = backend.batch_exists_each(keys)
        assert exists[6:] == [True] * 6
        assert not any(exists[i] for i in (0, 1, 4)), "a page of the wrong size is reported as existing"
        assert backend.get_stats()["counters"]["integrity_failures"] >= len(damage)
        # a damaged page heals on rewrite
        assert workload._write(keys[:6]) == 6
        before = workload.report.hits
        workload._read(keys[:6])
        assert workload.report.hits - before == 6
    finally:
        backend.close()
    assert_clean(workload)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def _writer(root: str, salt: str, version: int, seconds: float, events: tuple[Any, Any]) -> None:
    """Child process: write the shared keys with its own version for ``seconds``."""
    ready, go = events
    backend, pool = open_file(Path(root), io_threads=2)
    workload = Workload(backend, pool, batch=8, universe=32, salt=salt, versions=(version,), seed=version)
    ready.set()
    go.wait(10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = workload._rng.randrange(0, 24)
        workload._write(workload.keys[start : start + 8])
    backend.close()
    if workload.report.exceptions or workload.report.set_failed or pool.used_pages:
        raise SystemExit(f"writer {version}: {workload.report}")


def test_two_processes_write_the_same_keys(tmp_path: Path) -> None:
    root = tmp_path / "store"
    salt = "shared-keys"
    context = multiprocessing.get_context("spawn")
    ready = [context.Event(), context.Event()]
    go = context.Event()
    writers = [
        context.Process(target=_writer, args=(str(root), salt, version, 2.0, (ready[i], go)))
        for i, version in enumerate((1, 2))
    ]
    backend, pool = open_file(root)
    reader = Workload(backend, pool, batch=8, universe=32, salt=salt, versions=(1, 2))
    try:
        race_writers(writers, ready, go, reader, start_s=30, read_s=2.0, join_s=20)
    finally:
        backend.close()
    assert_clean(reader)
    assert reader.report.hits > 100, "the reader hardly ever hit: the race was not exercised"
    assert temp_files(root) == []
    record("file.two_writers.verified_hits", reader.report.hits)
    record("file.two_writers.page_bytes", pool.bytes_per_page)
    assert pool.page_size == PAGE_SIZE


# --------------------------------------------------------------------------- power loss
POWER_VERSIONS = tuple(range(8))


def _fsync_writer(root: str, salt: str, log_path: str, ready: Any) -> None:
    """Child process: write pages with ``fsync: true`` until killed; log every acknowledged page (fsynced)."""
    backend, pool = open_file(Path(root), fsync=True, io_threads=2)
    workload = Workload(backend, pool, batch=8, universe=64, salt=salt, versions=POWER_VERSIONS)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    ready.set()
    number = 0
    while True:
        version = POWER_VERSIONS[number % len(POWER_VERSIONS)]
        start = (number * 8) % (len(workload.keys) - 8)
        keys = workload.keys[start : start + 8]
        indices = pool.alloc(len(keys) * PAGE_SIZE)
        for key, first in zip(keys, indices[::PAGE_SIZE].tolist(), strict=True):
            fill_page(pool, int(first), workload.expected(key, version))
        results = backend.batch_set_v1(keys, indices)
        pool.free(indices)
        acked = "".join(f"{key}\n" for key, ok in zip(keys, results, strict=True) if ok)
        os.write(log, acked.encode())
        os.fsync(log)
        number += 1


def _drop_caches() -> str | None:
    """Drop the page cache (as after a power loss, reads then come from the disk); the reason when refused."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as control:
            control.write("1\n")
    except OSError as error:
        return f"drop_caches refused ({error.strerror}): pages were read back from the page cache"
    return None


def test_writer_killed_mid_write_with_fsync_never_leaves_a_wrong_page(tmp_path: Path) -> None:
    """A writer with ``fsync: true`` is killed with SIGKILL mid-batch; the caches are dropped where
    allowed; every page read back is a whole version of its own key, and every acknowledged page reads."""
    root = tmp_path / "store"
    salt = "power-loss"
    log_path = tmp_path / "acked.log"
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    writer = context.Process(target=_fsync_writer, args=(str(root), salt, str(log_path), ready))
    writer.start()
    try:
        assert ready.wait(60), "writer process did not start"
        time.sleep(random.uniform(0.4, 1.2))  # anywhere in a batch: before, during or after an fsync
        os.kill(writer.pid or 0, 9)
    finally:
        writer.join(20)
    assert writer.exitcode == -9
    skipped = _drop_caches()
    record("file.power_loss.drop_caches", skipped or "done")
    backend, pool = open_file(root)
    reader = Workload(backend, pool, batch=8, universe=64, salt=salt, versions=POWER_VERSIONS)
    acked = set(log_path.read_text().split()) if log_path.exists() else set()
    try:
        for begin in range(0, len(reader.keys), 8):
            reader._read(reader.keys[begin : begin + 8])
        exists = backend.batch_exists_each(reader.keys)
    finally:
        backend.close()
    assert_clean(reader)
    assert acked, "the writer acknowledged nothing before it was killed"
    missing = [key for key, present in zip(reader.keys, exists, strict=True) if key in acked and not present]
    assert missing == [], f"{len(missing)} acknowledged pages are gone"
    assert reader.report.hits >= len(acked)
    record("file.power_loss.acknowledged_pages", len(acked))
    record("file.power_loss.verified_hits", reader.report.hits)
    record("file.power_loss.temp_files_left", len(temp_files(root)))


def _read_only_file(root: Path, **extra: Any) -> HiCacheStorage:
    return HiCacheStorage(FileBackend, make_config("m", extra_config={"path": str(root), **extra}))


@pytest.fixture
def read_only_root(tmp_path: Path) -> Iterator[Path]:
    """A directory holding pages, then remounted read-only (root gets EROFS too)."""
    root = tmp_path / "ro"
    root.mkdir()
    mount("--bind", str(root), str(root))
    try:
        yield root
    finally:
        umount(root)


@pytest.mark.skipif(not can_mount(), reason="mount is not available (needs root)")
def test_read_only_option_on_a_read_only_mount(read_only_root: Path) -> None:
    writer = _read_only_file(read_only_root)
    writer.register_mem_pool_host(make_pool())
    workload = Workload(writer, writer.mem_pool_host, batch=4, universe=8)
    assert workload._write(workload.keys[:4]) == 4
    writer.close()
    mount("-o", "remount,ro,bind", str(read_only_root))
    with pytest.raises(ConfigError, match="not writable"):
        _read_only_file(read_only_root)
    reader = _read_only_file(read_only_root, read_only=True)
    reader.register_mem_pool_host(make_pool())
    work = Workload(reader, reader.mem_pool_host, batch=4, universe=8)
    work.keys = workload.keys
    assert work._read(workload.keys[:4]) == 4
    assert work._write(workload.keys[4:8]) == 0
    reader.close()
    assert_clean(work)
