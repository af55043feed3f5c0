"""Mooncake Store faults on private servers: ``mooncake_master`` killed mid-run and restarted,
writers racing on the same keys, and a store too small for a batch.

The master holds all object metadata in memory, so a restart loses every object; the segment
holder and clients must register again. The test measures what the backend does (reconnects by
itself, or keeps failing fast) and asserts what must hold either way: no exception reaches the
caller, no wrong byte is served, no host slot leaks, every call during the outage is bounded, and a
backend opened after the restart serves again.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hicache_storage_mooncake import MooncakeBackend
from mooncake_support import open_mooncake, open_on_ports, store_options

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.testing import make_pool, page_bytes, page_indices
from hicache_storage.testing.fault_figures import record
from hicache_storage.testing.outage import PrivateServices, Workload, assert_clean, make_keys, race_writers
from hicache_storage.testing.ports import HOST

pytestmark = [pytest.mark.services, pytest.mark.timeout(150)]

RESILIENCE = {"deadline_s": 2.0, "retries": 1, "breaker_threshold": 5, "breaker_reset_s": 0.5}


def test_mooncake_master_killed_mid_run(services: PrivateServices) -> None:
    backend = open_mooncake(services, "rel", resilience=RESILIENCE)
    workload = Workload(backend, backend.mem_pool_host)
    stop = threading.Event()
    thread = workload.start(stop)
    try:
        time.sleep(1.5)
        fault_at = time.monotonic()
        services.ctl("kill", "mooncake-master")
        time.sleep(2.0)
        services.ctl("stop", "mooncake-segment")
        services.ctl("start", "mooncake")
        restored_at = time.monotonic()
        record("mooncake.master_kill.outage_s", restored_at - fault_at)
        recovery = workload.wait_recovered(restored_at, 20)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "a call hung: the workload did not stop"
    before = workload.report.between(0, fault_at)
    try:
        backend.close()
    except Exception as error:  # close must not raise either
        pytest.fail(f"close() raised after the master restart: {error!r}")
    assert_clean(workload)
    assert sum(s.hits for s in before) > 0, "nothing was verified before the fault"
    # a round that began during the outage may end well after the restart (each call is bounded by
    # the resilience deadline, not by the restart), so select rounds by overlap, not by end time
    outage = workload.report.overlapping(fault_at, restored_at)
    # the kill shows as a failed write or as a miss on pages just written (a write that reached the
    # segment before the master died can still report success)
    assert any(s.set_ok < s.set_total or s.hits < s.reads for s in outage), (
        f"the kill was not observed in {restored_at - fault_at:.1f}s of outage: {outage}"
    )
    worst = max((s.seconds for s in outage), default=0.0)
    assert worst < 3 * (RESILIENCE["deadline_s"] * 2 + 1), f"a round took {worst:.1f}s while the master was down"
    record("mooncake.master_kill.max_round_s_during_outage", worst)
    record("mooncake.master_kill.same_client_recovery_s", recovery)
    # whatever the old client does, a client opened after the restart must serve
    fresh = open_mooncake(services, "rel", resilience=RESILIENCE)
    check = Workload(fresh, fresh.mem_pool_host)
    begin = time.monotonic()
    try:
        while time.monotonic() - begin < 15:
            sample = check.round()
            if sample.set_ok == sample.set_total and sample.hits == sample.reads:
                break
    finally:
        fresh.close()
    assert_clean(check)
    assert check.report.hits > 0, "a client opened after the master restart does not serve"
    record("mooncake.master_kill.new_client_serves_after_s", time.monotonic() - begin)


def test_mooncake_concurrent_overwrite_and_read_serve_right_bytes(services: PrivateServices) -> None:
    """Eight threads write and read the same 64 keys (identical content per key) for 4 s: every hit
    must hold its own key's bytes."""
    backend = open_mooncake(services, "rel", resilience=RESILIENCE)
    pool = backend.mem_pool_host
    workloads = [Workload(backend, pool, batch=8, universe=64, salt="shared", seed=i) for i in range(8)]
    stop = threading.Event()
    threads = [w.start(stop, pause_s=0.0) for w in workloads]
    time.sleep(4.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    backend.close()
    wrong = sum(w.report.wrong_pages for w in workloads)
    hits = sum(w.report.hits for w in workloads)
    record("mooncake.contention.hits", hits)
    record("mooncake.contention.wrong_pages", wrong)
    assert hits > 0
    for workload in workloads:
        assert_clean(workload)


def _mooncake_writer(ports: list[int], where: tuple[str, str], version: int, events: tuple[Any, Any]) -> None:
    """Child process: its own Mooncake client writes ``version`` of the shared keys for 2.5 s."""
    ready, go = events
    salt, prefix = where
    seconds = 2.5
    backend = open_on_ports(ports, prefix, resilience=RESILIENCE)
    pool = backend.mem_pool_host
    workload = Workload(backend, pool, batch=8, universe=32, salt=salt, versions=(version,), seed=version)
    ready.set()
    go.wait(30)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = workload._rng.randrange(0, 24)
        workload._write(workload.keys[start : start + 8])
    backend.close()
    if workload.report.exceptions or pool.used_pages:
        raise SystemExit(f"writer {version}: {workload.report.exceptions[:3]}")


def test_mooncake_two_processes_write_the_same_keys(services: PrivateServices) -> None:
    """Two processes (two clients) write different versions of the same 32 keys while a third reads:
    every hit is one whole version of its own key."""
    import multiprocessing

    services.ctl("start", "mooncake")
    salt = f"mc-shared-{secrets.token_hex(3)}"
    prefix = f"two{secrets.token_hex(3)}/"
    context = multiprocessing.get_context("spawn")
    ready = [context.Event(), context.Event()]
    go = context.Event()
    ports = list(services.mooncake_ports)
    writers = [
        context.Process(target=_mooncake_writer, args=(ports, (salt, prefix), version, (ready[i], go)))
        for i, version in enumerate((1, 2))
    ]
    backend = open_on_ports(ports, prefix, resilience=RESILIENCE)
    reader = Workload(backend, backend.mem_pool_host, batch=8, universe=32, salt=salt, versions=(1, 2))
    try:
        race_writers(writers, ready, go, reader, start_s=60, read_s=2.5, join_s=60)
    finally:
        backend.close()
    assert_clean(reader)
    record("mooncake.two_writers.verified_hits", reader.report.hits)
    record("mooncake.two_writers.misses", reader.report.misses)


# ---------------------------------------------------------------- a full store
#: The segment holder of the full-store tests: room for fewer pages than one batch writes.
SMALL_SEGMENT = "16MB"  # the least mooncake_client accepts


@pytest.fixture(scope="module")
def small_store() -> Iterator[PrivateServices]:
    """A private master whose segment holder lends only :data:`SMALL_SEGMENT`."""
    owned = PrivateServices()
    assert owned.env is not None
    owned.env["HICACHE_TEST_MOONCAKE_SEGMENT_SIZE"] = SMALL_SEGMENT
    try:
        owned.ctl("start", "mooncake")
        yield owned
    finally:
        owned.close()


@pytest.mark.parametrize("transfer", ["zero_copy", "staged"])
def test_full_store_writes_are_false_and_reads_miss(small_store: PrivateServices, transfer: str) -> None:
    """A batch larger than the store: the keys that found no room are ``False`` (counted as
    ``mooncake_no_available_handle``) and read as misses, nothing raises, the stored ones read back
    right; once the batch is deleted, writes succeed again."""
    master, metadata = (f"{HOST}:{port}" for port in small_store.mooncake_ports[:2])
    options = store_options(master, f"http://{metadata}/metadata", transfer=transfer, resilience=RESILIENCE)
    backend = HiCacheStorage(MooncakeBackend, make_config("full-store", extra_config=options))
    pool = make_pool(num_pages=256, page_size=64, layer_num=2, head_dim=128)
    backend.register_mem_pool_host(pool)  # 128 KiB pages: 128 of them are 16 MiB, and more with headers
    try:
        keys = make_keys(128)
        stored = backend.batch_set_v1(keys, page_indices(0, 128, 64))
        assert len(stored) == 128 and 0 < sum(stored) < 128, f"{sum(stored)} of 128 pages stored"
        assert backend.get_stats()["counters"].get("mooncake_no_available_handle", 0) > 0
        hits = backend.batch_get_v1(keys, page_indices(128, 128, 64))
        assert not any(hit and not ok for hit, ok in zip(hits, stored)), "a page that was not stored was read"
        for n, hit in enumerate(hits):
            if hit:
                assert page_bytes(pool, 128 + n) == page_bytes(pool, n)
        assert all(backend.delete(keys))
        again = make_keys(4)
        assert backend.batch_set_v1(again, page_indices(0, 4, 64)) == [True] * 4
    finally:
        backend.clear(everything=True)
        backend.close()
