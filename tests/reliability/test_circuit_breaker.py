"""The circuit breaker against a real server that is down or hung: fail fast, then recover by probe.

A killed server refuses connections at once, so each failed call is already short; a hung server
(``SIGSTOP``: the kernel still accepts connections, nothing answers) costs the full deadline per
call. The breaker turns both into microsecond misses after ``breaker_threshold`` faulted calls, and
one half-open probe per ``breaker_reset_s`` finds the server again.
"""

from __future__ import annotations

import os
import secrets
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rel_support import PrivateServices, Workload, assert_clean, make_pool, record

from hicache_storage import load_backend, make_config

pytest.importorskip("hicache_storage_redis")
from hicache_storage_redis import RedisBackend

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

THRESHOLD = 3
RESET_S = 1.0
DEADLINE_S = 0.5


def open_backend(services: PrivateServices) -> tuple[RedisBackend, Any]:
    pool = make_pool()
    resilience = {
        "deadline_s": DEADLINE_S,
        "retries": 1,
        "backoff_s": 0.01,
        "breaker_threshold": THRESHOLD,
        "breaker_reset_s": RESET_S,
    }
    extra = {"url": services.redis_url, "key_prefix": f"cb{secrets.token_hex(3)}:", "resilience": resilience}
    backend = load_backend(RedisBackend, make_config("rel-model", extra_config=extra))
    backend.register_mem_pool_host(pool)
    return backend, pool


def timed(fn: Callable[[], Any]) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def breaker_state(backend: RedisBackend) -> str:
    """State of the read breaker (the calls this test makes are reads)."""
    return str(backend.get_stats()["resilience"]["breakers"]["read"]["state"])


def exercise(
    services: PrivateServices, label: str, inject: Callable[[], None], restore: Callable[[], None]
) -> dict[str, float]:
    backend, pool = open_backend(services)
    workload = Workload(backend, pool, batch=4)
    keys = workload.keys[:4]
    indices = pool.alloc(len(keys) * pool.page_size)
    assert indices is not None
    results: list[list[bool]] = []

    def read() -> None:
        results.append(backend.batch_get_v1(keys, indices))

    try:
        workload._write(keys)
        healthy = statistics.median(timed(read) for _ in range(5))
        assert results[-1] == [True] * len(keys)
        results.clear()
        inject()
        try:
            before_open: list[float] = []
            while breaker_state(backend) != "open" and len(before_open) < THRESHOLD + 5:
                before_open.append(timed(read))
            assert breaker_state(backend) == "open", f"breaker still {breaker_state(backend)} after {before_open}"
            assert len(before_open) == THRESHOLD, "the breaker should open after exactly breaker_threshold faults"
            after_open = [timed(read) for _ in range(200)]
            short = backend.get_stats()["counters"].get("short_circuited", 0)
            assert short >= 200
            assert all(r == [False] * len(keys) for r in results), "a read during the outage was not a miss"
        finally:
            restored_at = time.monotonic()
            restore()
            pool.free(indices)
        # recovery: calls fail fast until the reset period ends, then one probe closes the breaker
        recovered = None
        deadline = time.monotonic() + RESET_S + 10
        while time.monotonic() < deadline:
            sample = workload.round()
            if sample.set_ok == sample.set_total and sample.hits == sample.reads:
                recovered = time.monotonic() - restored_at
                break
            time.sleep(0.02)
        assert recovered is not None, "no half-open probe recovered the backend"
        assert breaker_state(backend) == "closed"
    finally:
        backend.close()
    assert_clean(workload)
    fail_before = statistics.median(before_open)
    fail_after = statistics.median(after_open)
    fail_after_p99 = statistics.quantiles(after_open, n=100)[98]
    assert fail_after < 0.002, f"a short-circuited call took {fail_after * 1000:.2f} ms (median)"
    assert fail_after * 3 < fail_before, (fail_before, fail_after)
    figures = {
        "healthy_read_ms": healthy * 1000,
        "failed_call_before_open_ms": fail_before * 1000,
        "failed_call_after_open_median_ms": fail_after * 1000,
        "failed_call_after_open_p99_ms": fail_after_p99 * 1000,
        "recovery_after_restore_s": recovered,
    }
    for name, value in figures.items():
        record(f"breaker.{label}.{name}", value)
    return figures


def _redis_pid(services: PrivateServices) -> int:
    return int(Path(services.dir, "redis", "pid").read_text().split()[0])


def test_breaker_with_hung_server(services: PrivateServices) -> None:
    services.ctl("start", "redis")
    pid = _redis_pid(services)
    figures = exercise(services, "hung", lambda: os.kill(pid, signal.SIGSTOP), lambda: os.kill(pid, signal.SIGCONT))
    # a hung server costs about the deadline per call until the breaker opens
    assert figures["failed_call_before_open_ms"] >= DEADLINE_S * 1000 * 0.8
    assert figures["failed_call_before_open_ms"] <= DEADLINE_S * 1000 * 2.5


def test_breaker_with_killed_server(services: PrivateServices) -> None:
    services.ctl("start", "redis")
    figures = exercise(
        services, "killed", lambda: services.ctl("kill", "redis"), lambda: services.ctl("start", "redis")
    )
    assert figures["recovery_after_restore_s"] <= RESET_S + 5
