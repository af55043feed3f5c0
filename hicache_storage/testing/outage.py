"""The test kit's outage tools: private test servers, verifiable pages, an engine-like fault workload.

Every server a test kills runs under its own state directory and its own ports (the checkout's
``scripts/services/ctl.sh``, pointed elsewhere through the ``HICACHE_*`` variables), so killing it
disturbs nothing else on the machine. :class:`Workload` drives a storage instance as the engine's
I/O threads do and counts every wrong page it is served; :func:`fault_phase` runs it through
healthy → fault → restored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from . import make_pool as make_test_pool
from . import random_keys
from .fixtures import checkout_services
from .ports import HOST, free_ports
from .services import TestServices

PAGE_SIZE = 4


# --------------------------------------------------------------------------- servers
class PrivateServices(TestServices):
    """Test servers (redis, redis-cluster, s3, mooncake) owned by one test module."""

    def __init__(self, root: str | Path | None = None) -> None:
        """Servers of the checkout holding ``root`` (default: the one holding this package)."""
        checkout = checkout_services(root or __file__).root
        self.dir = tempfile.mkdtemp(prefix="hc-rel-services-")
        redis_port, s3_port = free_ports(2)
        cluster = free_ports(3, bus_offset=10000)
        mooncake = free_ports(4)
        env = {
            **os.environ,
            "HICACHE_SERVICES_DIR": self.dir,
            "HICACHE_SERVICES_TIMEOUT": "30",
            "HICACHE_TEST_REDIS_PORT": str(redis_port),
            "HICACHE_TEST_REDIS_CLUSTER_PORTS": " ".join(map(str, cluster)),
            "HICACHE_TEST_S3_PORT": str(s3_port),
            "HICACHE_TEST_MOONCAKE_RPC_PORT": str(mooncake[0]),
            "HICACHE_TEST_MOONCAKE_HTTP_PORT": str(mooncake[1]),
            "HICACHE_TEST_MOONCAKE_METRICS_PORT": str(mooncake[2]),
            "HICACHE_TEST_MOONCAKE_CLIENT_PORT": str(mooncake[3]),
        }
        for name in [k for k in env if k.startswith("HICACHE_TEST_") and k.endswith(("_URL", "_NODES"))]:
            del env[name]
        for name in ("HICACHE_TEST_S3_ENDPOINT", "HICACHE_TEST_MOONCAKE_MASTER", "HICACHE_TEST_MOONCAKE_METADATA"):
            env.pop(name, None)
        super().__init__(checkout, env, timeout_s=120)
        self.redis_port = redis_port
        self.cluster_ports = cluster
        self.s3_port = s3_port
        self.mooncake_ports = mooncake
        self.started: set[str] = set()

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis_port}/0"

    @property
    def cluster_nodes(self) -> list[str]:
        return [f"{HOST}:{p}" for p in self.cluster_ports]

    @property
    def s3_endpoint(self) -> str:
        return f"http://{HOST}:{self.s3_port}"

    def ctl(self, action: str, *names: str, attempts: int = 2) -> float:
        """Run ``ctl.sh ACTION NAMES``; returns seconds taken. Raises with the log tail on failure."""
        seconds = self.run(action, *names, attempts=attempts, pause_s=0.5)
        if action in ("start", "restart"):
            self.started.update(names)
        return seconds

    def close(self) -> None:
        """Stop everything this object started and remove its state directory."""
        if self.started:
            with contextlib.suppress(RuntimeError):
                self.run("stop", "all")
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- pages
def make_pool(num_pages: int = 64, layout: str = "page_first", head_dim: int = 32) -> HostKVPool:
    """A small zero-filled MHA host pool: 2 layers, 2 heads, bf16, pages of 4 tokens (2 KiB with head_dim 32)."""
    return make_test_pool(layout, num_pages=num_pages, page_size=PAGE_SIZE, layer_num=2, head_dim=head_dim, seed=None)


#: ``make_keys(count, salt=None)``: ``count`` page-hash-like keys, unique to this call unless ``salt`` is given.
make_keys = random_keys


def page_content(key: str, version: int, nbytes: int) -> bytes:
    """The bytes page ``key`` holds in ``version``: pseudo-random, seeded by key and version."""
    seed = int.from_bytes(hashlib.sha256(f"{key}/{version}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).bytes(nbytes)


def fill_page(pool: HostKVPool, token_index: int, data: bytes) -> None:
    """Write ``data`` over the page at ``token_index`` (through its segments, in page byte order)."""
    offset = 0
    for segment in pool.page_segments(token_index):
        view = segment.cast("B")
        view[:] = data[offset : offset + view.nbytes]
        offset += view.nbytes
    assert offset == len(data)


def read_page(pool: HostKVPool, token_index: int) -> bytes:
    """The bytes of the page at ``token_index``."""
    return b"".join(bytes(segment) for segment in pool.page_segments(token_index))


def scramble_pages(pool: HostKVPool, indices: torch.Tensor) -> None:
    """Fill the pages of ``indices`` with garbage, so a read that writes nothing cannot look right."""
    for start in indices[::PAGE_SIZE].tolist():
        fill_page(pool, int(start), secrets.token_bytes(pool.bytes_per_page))


# --------------------------------------------------------------------------- workload
@dataclass
class Sample:
    """One workload round: when it ended, and what happened."""

    at: float
    set_ok: int
    set_total: int
    hits: int
    reads: int
    seconds: float


@dataclass
class WorkloadReport:
    """What a :class:`Workload` did so far, counted over all its rounds."""

    rounds: int = 0
    set_ok: int = 0
    """Pages written (``batch_set_v1`` said ``True``)."""
    set_failed: int = 0
    hits: int = 0
    """Pages read back with the bytes last written."""
    misses: int = 0
    wrong_pages: int = 0
    """Pages read back with other bytes than last written (never allowed)."""
    exceptions: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    def between(self, begin: float, end: float) -> list[Sample]:
        """Rounds that ended in ``[begin, end)``."""
        return [s for s in self.samples if begin <= s.at < end]

    def overlapping(self, begin: float, end: float) -> list[Sample]:
        """Rounds that were running at some moment of ``[begin, end)``, wherever they ended."""
        return [s for s in self.samples if s.at >= begin and s.at - s.seconds < end]


class Workload:
    """An engine-like loop over one backend: write a batch from host slots, check it exists, read it back.

    Each round allocates host slots from the pool (owner = this workload) and frees them in
    ``finally``, like the engine's I/O threads. Page content derives from (key, version); every hit
    is compared with the content of every version allowed for that key (``versions``), so a
    torn, stale-from-another-key or corrupt page counts as ``wrong_pages``. Exceptions from the
    backend are recorded, never swallowed silently.
    """

    def __init__(
        self,
        backend: HiCacheStorage,
        pool: HostKVPool,
        *,
        batch: int = 8,
        universe: int = 256,
        versions: Sequence[int] = (0,),
        write_version: int | None = None,
        salt: str | None = None,
        seed: int = 0,
    ) -> None:
        self.backend = backend
        self.pool = pool
        self.batch = batch
        self.keys = make_keys(universe, salt)
        self.versions = tuple(versions)
        self.write_version = self.versions[0] if write_version is None else write_version
        self.report = WorkloadReport()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._page_bytes = pool.bytes_per_page
        self._expected: dict[tuple[str, int], bytes] = {}

    def expected(self, key: str, version: int) -> bytes:
        cached = self._expected.get((key, version))
        if cached is None:
            cached = self._expected[(key, version)] = page_content(key, version, self._page_bytes)
        return cached

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as error:  # recorded: the contract says none reach the caller
            self.report.exceptions.append(f"{what}: {type(error).__name__}: {error}")
            return None
        if result is None:
            self.report.exceptions.append(f"{what}: returned None")
        return result

    def verify(self, key: str, data: bytes) -> bool:
        return any(data == self.expected(key, v) for v in self.versions)

    def round(self) -> Sample:
        """One round: write ``batch`` keys, exists, read them back, plus a read of older keys."""
        begin = time.monotonic()
        start = self._rng.randrange(0, len(self.keys) - self.batch)
        keys = self.keys[start : start + self.batch]
        set_ok = self._write(keys)
        self._call("batch_exists", lambda: self.backend.batch_exists(keys))
        hits = self._read(keys)
        older = self._rng.sample(self.keys, self.batch)
        self._read(older)
        sample = Sample(time.monotonic(), set_ok, len(keys), hits, len(keys), time.monotonic() - begin)
        with self._lock:
            self.report.rounds += 1
            self.report.samples.append(sample)
        return sample

    def _alloc(self, count: int) -> torch.Tensor:
        indices = self.pool.alloc(count * PAGE_SIZE, owner=self)
        if indices is None:
            raise AssertionError(f"host pool exhausted: {self.pool.used_pages} pages in use (a leak?)")
        return indices

    def _write(self, keys: list[str]) -> int:
        indices = self._alloc(len(keys))
        try:
            for key, start in zip(keys, indices[::PAGE_SIZE].tolist(), strict=True):
                fill_page(self.pool, int(start), self.expected(key, self.write_version))
            result = self._call("batch_set_v1", lambda: self.backend.batch_set_v1(keys, indices))
        finally:
            self.pool.free(indices)
        ok = sum(1 for r in result or [] if r is True)
        with self._lock:
            self.report.set_ok += ok
            self.report.set_failed += len(keys) - ok
        return ok

    def _read(self, keys: list[str]) -> int:
        indices = self._alloc(len(keys))
        try:
            scramble_pages(self.pool, indices)
            result = self._call("batch_get_v1", lambda: self.backend.batch_get_v1(keys, indices))
            hits = wrong = 0
            for key, start, hit in zip(keys, indices[::PAGE_SIZE].tolist(), result or [False] * len(keys)):
                if hit is True:
                    hits += 1
                    if not self.verify(key, read_page(self.pool, int(start))):
                        wrong += 1
        finally:
            self.pool.free(indices)
        with self._lock:
            self.report.hits += hits
            self.report.misses += len(keys) - hits
            self.report.wrong_pages += wrong
        return hits

    def run_for(self, seconds: float, stop: threading.Event | None = None) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (stop is not None and stop.is_set()):
            self.round()

    def start(self, stop: threading.Event, pause_s: float = 0.005) -> threading.Thread:
        """Run rounds in a daemon thread until ``stop`` is set."""

        def loop() -> None:
            while not stop.is_set():
                try:
                    self.round()
                except AssertionError as error:
                    self.report.exceptions.append(f"harness: {error}")
                    return
                time.sleep(pause_s)

        thread = threading.Thread(target=loop, name="reliability-workload", daemon=True)
        thread.start()
        return thread

    def wait_verified(self, timeout_s: float) -> bool:
        """Wait until some round has read back a page (checked against its content); ``False`` on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if any(sample.hits for sample in self.report.samples):
                    return True
            time.sleep(0.02)
        return False

    def wait_recovered(self, since: float, timeout_s: float) -> float | None:
        """Seconds from ``since`` to the end of the first round after it that wrote and read all pages."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                for sample in self.report.samples:
                    if sample.at > since and sample.set_ok == sample.set_total and sample.hits == sample.reads:
                        return sample.at - since
            time.sleep(0.05)
        return None


def race_writers(
    writers: Sequence[Any],
    ready: Sequence[Any],
    go: Any,
    reader: Workload,
    *,
    start_s: float,
    read_s: float,
    join_s: float,
) -> None:
    """Start ``writers`` (processes), release them together and read with ``reader`` for ``read_s`` seconds.

    Each writer sets its ``ready`` event when it is about to write and waits for ``go``; every writer
    must exit with status 0. Writers still alive afterwards are killed.
    """
    for process in writers:
        process.start()
    try:
        for event in ready:
            assert event.wait(start_s), "writer process did not start"
        go.set()
        end = time.monotonic() + read_s
        while time.monotonic() < end:
            start = reader._rng.randrange(0, len(reader.keys) - reader.batch)
            reader._read(reader.keys[start : start + reader.batch])
        for process in writers:
            process.join(join_s)
            assert process.exitcode == 0
    finally:
        for process in writers:
            if process.is_alive():
                process.kill()


def assert_clean(workload: Workload) -> None:
    """The invariants every fault test checks at the end."""
    report = workload.report
    assert report.exceptions == [], report.exceptions[:5]
    assert report.wrong_pages == 0, f"{report.wrong_pages} wrong pages served"
    assert workload.pool.used_pages == 0, f"{workload.pool.used_pages} host pages leaked"
    assert workload.pool.owners() == {}


def round_trip_ok(backend: HiCacheStorage) -> bool:
    """One workload round on ``backend`` (its registered pool): every page written and read back intact.

    A refused or failed call is ``False``; an exception or a wrong page fails the calling test.
    """
    workload = Workload(backend, backend.mem_pool_host, batch=4, universe=16)
    sample = workload.round()
    assert_clean(workload)
    return sample.set_ok == sample.set_total and sample.hits == sample.reads


class SchedulingLag:
    """A thread that sleeps ``tick_s`` over and over and keeps the worst overshoot: how late this machine
    wakes a thread up right now (on a loaded host a call's own wake-ups are as late)."""

    def __init__(self, tick_s: float = 0.005) -> None:
        self.tick_s = tick_s
        self.worst_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduling-lag", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            time.sleep(self.tick_s)
            self.worst_s = max(self.worst_s, time.monotonic() - began - self.tick_s)

    def __enter__(self) -> SchedulingLag:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def fault_phase(
    workload: Workload,
    *,
    healthy_s: float,
    inject: Callable[[], None],
    outage_s: float,
    restore: Callable[[], None],
    recover_timeout_s: float,
) -> dict[str, float | None]:
    """Run ``workload`` in a thread through healthy → fault → restored; returns timings and counts.

    The healthy phase lasts ``healthy_s``, and longer (up to 10 s) until a round has read a page back.
    ``scheduling_lag_s`` is the worst thread wake-up delay seen meanwhile (:class:`SchedulingLag`).
    """
    stop = threading.Event()
    lag = SchedulingLag().__enter__()
    thread = workload.start(stop)
    try:
        time.sleep(healthy_s)
        workload.wait_verified(10.0)
        fault_at = time.monotonic()
        inject()
        time.sleep(outage_s)
        restore_begin = time.monotonic()
        restore()
        restored_at = time.monotonic()
        recovery = workload.wait_recovered(restored_at, recover_timeout_s)
    finally:
        stop.set()
        thread.join(timeout=30)
        lag.__exit__()
    assert not thread.is_alive(), "workload thread did not stop"
    during = workload.report.between(fault_at + 0.2, restore_begin)
    before = workload.report.between(0, fault_at)
    return {
        "recovery_s": recovery,
        "restore_s": restored_at - restore_begin,
        "rounds_before": float(len(before)),
        "hits_before": float(sum(s.hits for s in before)),
        "rounds_during": float(len(during)),
        "failed_sets_during": float(sum(s.set_total - s.set_ok for s in during)),
        "max_round_s_during": max((s.seconds for s in during), default=0.0),
        "scheduling_lag_s": lag.worst_s,
    }


# --------------------------------------------------------------------------- pids of private servers
def unit_pid(services: PrivateServices, unit: str) -> int:
    """Pid of a running unit of ``services`` (``redis``, ``s3``, ``mooncake-master``, ``redis-cluster-N``)."""
    if unit.startswith("redis-cluster-"):
        port = services.cluster_ports[int(unit.rsplit("-", 1)[1]) - 1]
        path = Path(services.dir, "redis-cluster", str(port), "pid")
    elif unit.startswith("mooncake-"):
        path = Path(services.dir, "mooncake", unit.split("-", 1)[1], "pid")
    else:
        path = Path(services.dir, unit, "pid")
    return int(path.read_text().split()[0])


# --------------------------------------------------------------------------- timed calls
class TimedWorkload(Workload):
    """A :class:`Workload` that also times every storage call it makes (``calls``: (ended at, seconds, what))."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[float, float, str]] = []

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        begin = time.monotonic()
        try:
            return super()._call(what, fn)
        finally:
            end = time.monotonic()
            with self._lock:
                self.calls.append((end, end - begin, what))

    def worst_call(self, begin: float = 0.0, end: float = float("inf")) -> tuple[float, str]:
        """(seconds, name) of the slowest call that ended in ``[begin, end)``."""
        with self._lock:
            chosen = [(seconds, what) for at, seconds, what in self.calls if begin <= at < end]
        return max(chosen, default=(0.0, ""))
