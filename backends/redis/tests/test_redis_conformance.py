"""The conformance suite against the redis backend: a standalone server and a 3-node Redis Cluster.

Both run on servers private to this module (started through scripts/services on spare ports), so
the fault category really stops them (the whole cluster for the cluster run) and starts them again
without disturbing anything else.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hicache_storage_conformance import BackendConformance
from hicache_storage_redis.conformance import RedisHooks

from hicache_storage.testing.outage import PrivateServices


class TestRedisConformance(BackendConformance):
    backend = "redis"
    service: ClassVar[str] = "redis"
    servers: ClassVar[PrivateServices]

    @pytest.fixture(scope="class", autouse=True)
    def _private_server(self, request: pytest.FixtureRequest, services: PrivateServices) -> None:
        services.ctl("start", self.service)
        request.cls.servers = services
        request.cls.hooks = RedisHooks(services)

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {"url": self.servers.redis_url, "key_prefix": f"conf{secrets.token_hex(4)}:"}


#: The first call of a cluster instance also fetches the slot map, which took up to 0.76 s (1 build in
#: 20, load average 10 on 2 cores): with the suite's 0.5 s deadline for injected faults, the write made
#: before each fault then failed. The cluster run gives every call 2 s, as the suite's outage tests do.
CLUSTER_RESILIENCE = {
    "deadline_s": 2.0,
    "retries": 1,
    "backoff_s": 0.001,
    "backoff_max_s": 0.01,
    "breaker_reset_s": 0.05,
}


class TestRedisClusterConformance(TestRedisConformance):
    service = "redis-cluster"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {
            "cluster": True,
            "nodes": self.servers.cluster_nodes,
            "key_prefix": f"conf{secrets.token_hex(4)}:",
            "resilience": CLUSTER_RESILIENCE,
        }
