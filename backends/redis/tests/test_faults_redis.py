"""Redis and Redis Cluster: the server dies mid-run and comes back; nothing wrong is ever served."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hicache_storage_redis import RedisBackend

from hicache_storage import HiCacheStorage, load_backend, make_config
from hicache_storage.testing.fault_figures import record
from hicache_storage.testing.outage import PrivateServices, Workload, assert_clean, fault_phase, make_pool

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

RESILIENCE = {"deadline_s": 1.0, "retries": 1, "breaker_threshold": 5, "breaker_reset_s": 0.5}


def open_redis(options: dict[str, Any]) -> tuple[HiCacheStorage, Any]:
    pool = make_pool()
    extra = {"key_prefix": f"rel{secrets.token_hex(3)}:", "resilience": RESILIENCE, **options}
    backend = load_backend(RedisBackend, make_config("rel-model", extra_config=extra))
    backend.register_mem_pool_host(pool)
    return backend, pool


def test_redis_killed_mid_run_and_restarted(services: PrivateServices) -> None:
    services.ctl("start", "redis")
    backend, pool = open_redis({"url": services.redis_url})
    workload = Workload(backend, pool)
    try:
        timings = fault_phase(
            workload,
            healthy_s=0.8,
            inject=lambda: services.ctl("kill", "redis"),
            outage_s=1.5,
            restore=lambda: services.ctl("start", "redis"),
            recover_timeout_s=15,
        )
        stats = backend.get_stats()
    finally:
        backend.close()
    assert_clean(workload)
    assert timings["hits_before"], "the workload never hit before the fault: nothing was verified"
    assert timings["failed_sets_during"], "the kill was not observed: no write failed during the outage"
    breakers = stats["resilience"]["breakers"]
    assert stats["faults"] > 0 and sum(b["times_opened"] for b in breakers.values()) >= 1
    assert timings["recovery_s"] is not None, "the backend did not serve again after redis-server restarted"
    assert timings["max_round_s_during"] < 2 * RESILIENCE["deadline_s"] * 3
    record("redis.kill.recovery_s", timings["recovery_s"])
    record("redis.kill.max_round_s_during_outage", timings["max_round_s_during"])
    record("redis.kill.wrong_pages", workload.report.wrong_pages)


def test_redis_cluster_node_stopped_and_restarted(services: PrivateServices) -> None:
    services.ctl("start", "redis-cluster")
    backend, pool = open_redis({"cluster": True, "nodes": services.cluster_nodes})
    workload = Workload(backend, pool, batch=12)
    try:
        timings = fault_phase(
            workload,
            healthy_s=0.8,
            inject=lambda: services.ctl("stop", "redis-cluster-2"),
            outage_s=2.0,
            restore=lambda: services.ctl("start", "redis-cluster-2"),
            recover_timeout_s=20,
        )
        during = [s for s in workload.report.samples if s.set_ok < s.set_total]
    finally:
        backend.close()
    assert_clean(workload)
    assert timings["hits_before"]
    assert during, "stopping one node never failed a write: the fault was not observed"
    assert timings["recovery_s"] is not None, "the cluster backend did not serve every slot again"
    record("redis_cluster.node_stop.recovery_s", timings["recovery_s"])
    record("redis_cluster.node_stop.restart_s", timings["restore_s"])
    record("redis_cluster.node_stop.failed_sets_during", timings["failed_sets_during"])
