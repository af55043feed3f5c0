"""S3 (moto server): the endpoint stops mid-run and restarts; nothing wrong is ever served."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from rel_support import PrivateServices, Workload, assert_clean, fault_phase, make_pool, record

from hicache_storage import make_config

pytest.importorskip("hicache_storage_s3")
import boto3
from hicache_storage_s3 import S3Backend

pytestmark = [pytest.mark.services, pytest.mark.timeout(90)]

RESILIENCE = {"deadline_s": 1.0, "retries": 1, "breaker_threshold": 5, "breaker_reset_s": 0.5}
ACCESS_KEY = "AKIARELIABILITYTEST1"
SECRET_KEY = "reliability-secret-" + "x" * 21


def s3_options(services: PrivateServices, bucket: str) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "endpoint_url": services.s3_endpoint,
        "region": "us-east-1",
        "aws_access_key_id": ACCESS_KEY,
        "aws_secret_access_key": SECRET_KEY,
        "prefix": f"rel{secrets.token_hex(3)}",
    }


def create_bucket(services: PrivateServices, bucket: str) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=services.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    client.create_bucket(Bucket=bucket)
    client.close()


def test_s3_server_stopped_mid_run_and_restarted(services: PrivateServices) -> None:
    services.ctl("start", "s3")
    bucket = f"rel-{secrets.token_hex(4)}"
    create_bucket(services, bucket)
    pool = make_pool()
    backend = S3Backend(
        make_config("rel-model", extra_config={**s3_options(services, bucket), "resilience": RESILIENCE})
    )
    backend.register_mem_pool_host(pool)
    workload = Workload(backend, pool)

    def restore() -> None:
        services.ctl("start", "s3")
        create_bucket(services, bucket)  # moto keeps nothing across a restart: the operator recreates the bucket

    try:
        timings = fault_phase(
            workload,
            healthy_s=1.0,
            inject=lambda: services.ctl("stop", "s3"),
            outage_s=1.5,
            restore=restore,
            recover_timeout_s=15,
        )
        stats = backend.get_stats()
    finally:
        backend.close()
    assert_clean(workload)
    assert timings["hits_before"]
    assert timings["failed_sets_during"]
    assert stats["faults"] > 0
    assert timings["recovery_s"] is not None, "the s3 backend did not serve again after the server restarted"
    record("s3.stop.recovery_s", timings["recovery_s"])
    record("s3.stop.restart_s", timings["restore_s"])
    record("s3.stop.max_round_s_during_outage", timings["max_round_s_during"])
