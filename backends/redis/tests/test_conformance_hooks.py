"""The redis conformance hooks stop only a test server of the checkout, the one the backend uses."""

from __future__ import annotations

import pytest
from hicache_storage_redis import RedisBackend
from hicache_storage_redis.conformance import RedisHooks
from redis_support import SERVICES

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.testing.hooks import SideChannelUnavailable
from hicache_storage.testing.ports import free_ports


@pytest.mark.parametrize("cluster", [False, True], ids=["standalone", "cluster"])
def test_outage_hooks_refuse_a_server_that_is_not_a_test_server(cluster: bool) -> None:
    (port,) = free_ports(1)
    options = {"cluster": True, "nodes": [f"127.0.0.1:{port}"]} if cluster else {"port": port}
    with HiCacheStorage(RedisBackend, make_config("m", extra_config=options)) as storage:
        backend = storage.backend
        assert isinstance(backend, RedisBackend)
        for hook in (RedisHooks(SERVICES).stop_server, RedisHooks().start_server):
            with pytest.raises(SideChannelUnavailable, match=f"connects to 127.0.0.1:{port}, not to its redis"):
                hook(backend)


def test_outage_hooks_find_the_test_server_the_backend_uses(redis_url: str, cluster_nodes: list[str]) -> None:
    """Which service the hooks would stop (nothing is stopped here: the servers are shared)."""
    hooks = RedisHooks(SERVICES)
    for options, service in (
        ({"url": redis_url}, "redis"),
        ({"cluster": True, "nodes": cluster_nodes[1:]}, "redis-cluster"),
    ):
        with HiCacheStorage(RedisBackend, make_config("m", extra_config=options)) as storage:
            backend = storage.backend
            assert isinstance(backend, RedisBackend)
            assert hooks.service_of(backend) == (SERVICES, service)
