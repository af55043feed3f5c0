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
from redis_support import CLUSTER_RESILIENCE

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


class TestRedisClusterConformance(TestRedisConformance):
    service = "redis-cluster"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {
            "cluster": True,
            "nodes": self.servers.cluster_nodes,
            "key_prefix": f"conf{secrets.token_hex(4)}:",
            "resilience": CLUSTER_RESILIENCE,
        }
