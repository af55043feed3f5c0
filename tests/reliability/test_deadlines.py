"""No call returns later than its deadline plus 100 ms, whatever the server does.

Each backend runs an engine-like workload (write 8 pages, check they exist, read them back, read
older pages) while its server is killed, hung (``SIGSTOP``), made slow (a proxy holding every
chunk for twice the deadline) or made to refuse (a proxy that accepts and resets every
connection), then restored. Every storage call is timed; the figures of each phase (worst call
against the deadline, wrong pages served, time to serve every page again) are kept for the table
in docs/reliability.md (printed at the end of the run; ``HICACHE_FAULT_TABLE=file.json`` saves
them). The breaker is off here (``breaker_threshold: 0``), so every call of an outage meets the
fault itself rather than failing fast.
"""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fault_proxy import FaultProxy
from rel_support import (
    HOST,
    PrivateServices,
    TimedWorkload,
    assert_clean,
    fault_phase,
    make_pool,
    record_fault_row,
    unit_pid,
)

from hicache_storage import HiCacheStorage, load_backend, make_config
from hicache_storage.testing.fault_figures import call_limit_s

pytestmark = [pytest.mark.services, pytest.mark.timeout(240)]

DEADLINE_S = 0.5
#: What a call may take beyond its deadline: thread wake-ups and bookkeeping, never another wait; on a
#: loaded host also twice the worst wake-up delay measured beside the workload (a call wakes up at most twice
#: late: once at its deadline, once to hand back its result).
SLACK_S = 0.1
RESILIENCE = {"deadline_s": DEADLINE_S, "retries": 1, "backoff_s": 0.01, "breaker_threshold": 0}
ACCESS_KEY, SECRET_KEY = "AKIADEADLINETEST0001", "deadline-secret-" + "y" * 24


def _stop(services: PrivateServices, unit: str) -> Callable[[], None]:
    return lambda: os.kill(unit_pid(services, unit), signal.SIGSTOP)


def _cont(services: PrivateServices, unit: str) -> Callable[[], None]:
    return lambda: os.kill(unit_pid(services, unit), signal.SIGCONT)


@pytest.fixture(scope="module")
def proxies() -> Iterator[list[FaultProxy]]:
    opened: list[FaultProxy] = []
    yield opened
    for proxy in opened:
        proxy.close()


def proxy_for(proxies: list[FaultProxy], port: int) -> FaultProxy:
    proxy = FaultProxy(port)
    proxies.append(proxy)
    return proxy


def proxy_faults(proxy: FaultProxy) -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    return {
        "slow (each chunk held 2x the deadline)": (
            lambda: proxy.set("delay", 2 * DEADLINE_S),
            lambda: proxy.set("pass"),
        ),
        "refusing (accept, then reset)": (lambda: proxy.set("reset"), lambda: proxy.set("pass")),
    }


def measure(
    name: str, fault: str, backend: HiCacheStorage, inject: Callable[[], None], restore: Callable[[], None]
) -> dict[str, Any]:
    """One fault phase on ``backend``: the calls stay within the deadline, nothing wrong is served, it recovers."""
    workload = TimedWorkload(backend, backend.mem_pool_host, batch=8, universe=64)
    try:
        timings = fault_phase(
            workload, healthy_s=0.6, inject=inject, outage_s=1.5, restore=restore, recover_timeout_s=20
        )
        stats = backend.get_stats()
    finally:
        backend.close()
    abandoned = stats["counters"].get("mooncake_abandoned_calls", 0)
    row = record_fault_row(
        name,
        fault,
        deadline_s=DEADLINE_S,
        workload=workload,
        recovery_s=timings["recovery_s"],
        faults=stats["faults"],
        abandoned_calls=abandoned,
        scheduling_lag_s=round(float(timings["scheduling_lag_s"] or 0.0), 4),
    )
    assert_clean(workload)
    observed = stats["faults"] + stats["counters"].get("node_faults", 0) + timings["failed_sets_during"]
    assert observed > 0, f"{name}/{fault}: the fault was never observed"
    assert timings["hits_before"], f"{name}/{fault}: nothing was verified before the fault"
    allowed = call_limit_s(row, SLACK_S)
    assert row["worst_call_s"] <= allowed, f"{name}/{fault}: a call overran its deadline ({allowed:.3f} s): {row}"
    assert timings["recovery_s"] is not None, f"{name}/{fault}: did not serve every page again: {row}"
    return row


# --------------------------------------------------------------------------- redis
def open_redis(**options: Any) -> HiCacheStorage:
    from hicache_storage_redis import RedisBackend

    extra = {"key_prefix": f"dl{secrets.token_hex(3)}:", "resilience": RESILIENCE, **options}
    backend = load_backend(RedisBackend, make_config("deadline-model", extra_config=extra))
    backend.register_mem_pool_host(make_pool())
    return backend


@pytest.mark.parametrize("fault", ["killed", "hung (SIGSTOP)"])
def test_redis_server_fault(services: PrivateServices, fault: str) -> None:
    pytest.importorskip("hicache_storage_redis")
    services.ctl("start", "redis")
    backend = open_redis(url=services.redis_url)
    if fault == "killed":
        inject, restore = (lambda: services.ctl("kill", "redis")), (lambda: services.ctl("start", "redis"))
    else:
        inject, restore = _stop(services, "redis"), _cont(services, "redis")
    measure("redis", fault, backend, inject, restore)


@pytest.mark.parametrize("fault", ["slow (each chunk held 2x the deadline)", "refusing (accept, then reset)"])
def test_redis_proxy_fault(services: PrivateServices, proxies: list[FaultProxy], fault: str) -> None:
    pytest.importorskip("hicache_storage_redis")
    services.ctl("start", "redis")
    proxy = proxy_for(proxies, services.redis_port)
    backend = open_redis(host=HOST, port=proxy.port)
    measure("redis", fault, backend, *proxy_faults(proxy)[fault])


@pytest.mark.parametrize("fault", ["node killed", "node hung (SIGSTOP)"])
def test_redis_cluster_node_fault(services: PrivateServices, fault: str) -> None:
    pytest.importorskip("hicache_storage_redis")
    services.ctl("start", "redis-cluster")
    backend = open_redis(cluster=True, nodes=services.cluster_nodes)
    if fault == "node killed":
        inject = lambda: services.ctl("kill", "redis-cluster-2")  # noqa: E731
        restore = lambda: services.ctl("start", "redis-cluster-2")  # noqa: E731
    else:
        inject, restore = _stop(services, "redis-cluster-2"), _cont(services, "redis-cluster-2")
    measure("redis-cluster", fault, backend, inject, restore)


# --------------------------------------------------------------------------- s3 and fsspec on s3
def create_bucket(endpoint: str, bucket: str) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    finally:
        client.close()


def open_s3(kind: str, endpoint: str, bucket: str) -> HiCacheStorage:
    if kind == "s3":
        from hicache_storage_s3 import S3Backend

        extra: dict[str, Any] = {
            "bucket": bucket,
            "endpoint_url": endpoint,
            "region": "us-east-1",
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "prefix": f"dl{secrets.token_hex(3)}",
        }
        backend: HiCacheStorage = load_backend(
            S3Backend, make_config("deadline-model", extra_config={**extra, "resilience": RESILIENCE})
        )
    else:
        from hicache_storage_fsspec import FsspecBackend

        storage = {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "endpoint_url": endpoint,
            "client_kwargs": {"region_name": "us-east-1"},
        }
        extra = {"url": f"s3://{bucket}/dl{secrets.token_hex(3)}", "storage_options": storage, "resilience": RESILIENCE}
        backend = load_backend(FsspecBackend, make_config("deadline-model", extra_config=extra))
    backend.register_mem_pool_host(make_pool())
    return backend


S3_FAULTS = ["killed", "hung (SIGSTOP)", "slow (each chunk held 2x the deadline)", "refusing (accept, then reset)"]


@pytest.mark.parametrize("fault", S3_FAULTS)
@pytest.mark.parametrize("kind", ["s3", "fsspec-s3"])
def test_s3_fault(services: PrivateServices, proxies: list[FaultProxy], kind: str, fault: str) -> None:
    pytest.importorskip("hicache_storage_s3" if kind == "s3" else "s3fs")
    services.ctl("start", "s3")
    bucket = f"dl-{secrets.token_hex(4)}"
    create_bucket(services.s3_endpoint, bucket)
    if fault in ("killed", "hung (SIGSTOP)"):
        backend = open_s3(kind, services.s3_endpoint, bucket)
        if fault == "killed":

            def restore() -> None:
                services.ctl("start", "s3")
                create_bucket(services.s3_endpoint, bucket)  # moto keeps nothing across a restart

            inject: Callable[[], None] = lambda: services.ctl("kill", "s3")  # noqa: E731
        else:
            inject, restore = _stop(services, "s3"), _cont(services, "s3")
    else:
        proxy = proxy_for(proxies, services.s3_port)
        backend = open_s3(kind, f"http://{proxy.address}", bucket)
        inject, restore = proxy_faults(proxy)[fault]
    measure(kind, fault, backend, inject, restore)


# --------------------------------------------------------------------------- mooncake
def open_mooncake(services: PrivateServices, master: str) -> HiCacheStorage:
    from hicache_storage_mooncake import MooncakeBackend

    http = services.mooncake_ports[1]
    extra = {
        "master_server_address": master,
        "metadata_server": f"http://{HOST}:{http}/metadata",
        "global_segment_size": 0,
        "local_buffer_size": 16 << 20,
        "setup_retries": 1,
        "key_prefix": f"dl{secrets.token_hex(3)}/",
        "resilience": RESILIENCE,
    }
    backend = load_backend(MooncakeBackend, make_config("deadline-model", extra_config=extra))
    backend.register_mem_pool_host(make_pool())
    return backend


@pytest.mark.parametrize("fault", S3_FAULTS)
def test_mooncake_master_fault(services: PrivateServices, proxies: list[FaultProxy], fault: str) -> None:
    pytest.importorskip("hicache_storage_mooncake")
    services.ctl("start", "mooncake")
    rpc = services.mooncake_ports[0]
    if fault == "killed":
        backend = open_mooncake(services, f"{HOST}:{rpc}")

        def restore() -> None:
            services.ctl("stop", "mooncake-segment")  # the holder re-registers with the new master
            services.ctl("start", "mooncake")

        inject: Callable[[], None] = lambda: services.ctl("kill", "mooncake-master")  # noqa: E731
    elif fault == "hung (SIGSTOP)":
        backend = open_mooncake(services, f"{HOST}:{rpc}")
        inject, restore = _stop(services, "mooncake-master"), _cont(services, "mooncake-master")
    else:
        proxy = proxy_for(proxies, rpc)
        backend = open_mooncake(services, proxy.address)
        inject, restore = proxy_faults(proxy)[fault]
    measure("mooncake", fault, backend, inject, restore)
