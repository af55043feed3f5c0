"""S3 (a private moto server): the endpoint stops mid-run and restarts; nothing wrong is ever served."""

from __future__ import annotations

import secrets

import pytest
from hicache_storage_s3 import S3Backend
from s3_support import PrivateBucket

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.testing.fault_figures import record
from hicache_storage.testing.outage import PrivateServices, Workload, assert_clean, fault_phase, make_pool

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

RESILIENCE = {"deadline_s": 1.0, "retries": 1, "breaker_threshold": 5, "breaker_reset_s": 0.5}


def test_s3_server_stopped_mid_run_and_restarted(services: PrivateServices) -> None:
    server = PrivateBucket(services, f"rel-{secrets.token_hex(4)}")
    server.start()
    pool = make_pool()
    options = {**server.options(), "prefix": f"rel{secrets.token_hex(3)}", "resilience": RESILIENCE}
    storage = HiCacheStorage(S3Backend, make_config("rel-model", extra_config=options))
    storage.register_mem_pool_host(pool)
    workload = Workload(storage, pool)
    try:
        timings = fault_phase(
            workload,
            healthy_s=1.0,
            inject=server.stop,
            outage_s=1.5,
            restore=server.start,  # moto keeps nothing across a restart: the bucket is created again
            recover_timeout_s=15,
        )
        stats = storage.get_stats()
    finally:
        storage.close()
    assert_clean(workload)
    assert timings["hits_before"]
    assert timings["failed_sets_during"]
    assert stats["faults"] > 0
    assert timings["recovery_s"] is not None, "the s3 backend did not serve again after the server restarted"
    record("s3.stop.recovery_s", timings["recovery_s"])
    record("s3.stop.restart_s", timings["restore_s"])
    record("s3.stop.max_round_s_during_outage", timings["max_round_s_during"])
