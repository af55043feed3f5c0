"""A capacity-bound store that evicts most of what it is given says so: a rate-limited warning and
the ``eviction_pressure`` counter; a full store whose pages outlive the window says nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hicache_storage import HostKVPool, load_backend, make_config
from hicache_storage import testing as kit
from hicache_storage.eviction_watch import EvictionWatch
from hicache_storage.stats import StorageStats


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def drive(watch: EvictionWatch, clock: Clock, seconds: int, pages_per_s: int, page_bytes: int) -> list[str]:
    """Write (and evict as many pages as written) for ``seconds``; the warnings returned."""
    warnings = []
    for _ in range(seconds):
        watch.wrote(pages_per_s, pages_per_s * page_bytes)
        _pressure, warning = watch.evicted(pages_per_s)
        if warning:
            warnings.append(warning)
        clock.now += 1
    return warnings


def test_a_full_store_that_holds_minutes_of_writes_is_quiet() -> None:
    clock = Clock()
    watch = EvictionWatch(capacity_bytes=10 * 60 * 100 * 4096, what="big", clock=clock)  # 10 minutes of writes
    assert drive(watch, clock, 300, 100, 4096) == []


def test_a_store_that_turns_over_within_a_minute_warns_once_per_five_minutes() -> None:
    clock = Clock()
    watch = EvictionWatch(capacity_bytes=20 * 100 * 4096, what="slab backend (capacity_bytes)", clock=clock)
    warnings = drive(watch, clock, 600, 100, 4096)  # 20 s of writes fill it
    assert len(warnings) == 2  # 10 minutes, at most one per 5 minutes
    assert warnings[0].startswith("slab backend (capacity_bytes): evicted ")
    assert "exceed its capacity of 8,192,000 bytes" in warnings[0]


def test_a_trickle_never_counts() -> None:
    clock = Clock()
    watch = EvictionWatch(capacity_bytes=4096, what="tiny", clock=clock)
    assert drive(watch, clock, 120, 0, 4096) == []
    watch.wrote(10, 10 * 4096)
    assert watch.evicted(10) == (False, None)  # fewer than 64 pages in the window


def test_stats_count_pressure_and_log(caplog: pytest.LogCaptureFixture) -> None:
    stats = StorageStats()
    stats.watch_evictions(64 * 4096, "test store")
    with caplog.at_level(logging.WARNING, logger="hicache_storage.evictions"):
        for _ in range(4):
            stats.record("set", pages=64, ok=64, nbytes=64 * 4096)
            stats.bump("evictions", 60)
    assert stats.get("eviction_pressure") == 1  # judged once per 10 s step of the window
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["test store"]


def test_a_too_small_sim_store_warns_through_its_stats(caplog: pytest.LogCaptureFixture) -> None:
    pool = kit.make_pool(num_pages=64)
    page = pool.bytes_per_page
    with load_backend(
        "sim", make_config("m", extra_config={"capacity_bytes": 8 * page, "manifests": False})
    ) as storage:
        storage.register_mem_pool_host(pool)
        with caplog.at_level(logging.WARNING, logger="hicache_storage.evictions"):
            for _ in range(4):
                storage.batch_set_v1(kit.random_keys(64), kit.page_indices(0, 64))
        assert storage.get_stats()["counters"]["eviction_pressure"] >= 1
    assert any(r.getMessage().startswith("sim backend (capacity_bytes): evicted") for r in caplog.records)


def test_a_slab_too_small_for_its_workload_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pool = HostKVPool(num_pages=64, page_size=16, layer_num=1, head_num=1, head_dim=256, dtype="bfloat16")
    extra = {"path": str(tmp_path), "capacity_bytes": 8 << 20, "manifests": False}
    with load_backend("slab", make_config("m", extra_config=extra)) as storage:
        storage.register_mem_pool_host(pool)
        with caplog.at_level(logging.WARNING, logger="hicache_storage.evictions"):
            for _ in range(12):  # 768 pages of 16 KiB: 12 MiB into an 8 MiB store
                storage.batch_set_v1(kit.random_keys(64), kit.page_indices(0, 64, pool.page_size))
        counters = storage.get_stats()["counters"]
        assert counters["evictions"] > 0 and counters["eviction_pressure"] >= 1
    assert any(r.getMessage().startswith("slab backend (capacity_bytes): evicted") for r in caplog.records)
