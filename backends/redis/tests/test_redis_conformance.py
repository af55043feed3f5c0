"""The conformance suite against the redis backend: standalone server and Redis Cluster.

The fault category really stops the server (scripts/services/stop.sh) and starts it again.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from hicache_storage_conformance import BackendConformance
from redis_support import control, settings


class TestRedisConformance(BackendConformance):
    backend = "redis"
    service = "redis"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        control("start", self.service)
        return {"url": settings()["HICACHE_TEST_REDIS_URL"], "key_prefix": f"conf{secrets.token_hex(4)}:"}

    def stop_server(self, backend: Any) -> None:
        control("stop", self.service)

    def start_server(self, backend: Any) -> None:
        control("start", self.service)


class TestRedisClusterConformance(TestRedisConformance):
    service = "redis-cluster"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        control("start", self.service)
        nodes = settings()["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")
        return {"cluster": True, "nodes": nodes, "key_prefix": f"conf{secrets.token_hex(4)}:"}
