"""Test-only hooks of the redis backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``redis``, so
``hicache-storage conformance redis`` runs every category, faults included:

- ``raw_store(backend)``: the stored records through the backend's own client
  (:class:`~hicache_storage_redis.raw_store.RedisRawStore`);
- ``stop_server(backend)`` / ``start_server(backend)``: stop and start the source checkout's test
  server (``scripts/services``: ``redis``, or every node of ``redis-cluster``) the backend connects to.
  Only such a test server is ever stopped: for any other server, or outside a source checkout, the
  hooks raise :class:`~hicache_storage.testing.hooks.SideChannelUnavailable` naming why (the suite skips).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hicache_storage.testing.fixtures import checkout_services
from hicache_storage.testing.hooks import SideChannelUnavailable
from hicache_storage.testing.services import TestServices

from .backend import RedisBackend
from .client import server_addresses
from .options import parse_node
from .raw_store import RedisRawStore

__all__ = ["RedisHooks"]


class RedisHooks:
    """The side channel and the outage switch of :class:`~hicache_storage_redis.RedisBackend`.

    ``services``: the test servers the outage hooks control (default: those of the checkout holding
    this package, with the environment of each call, as ``scripts/services/env.sh`` reads it).
    """

    def __init__(self, services: TestServices | None = None) -> None:
        self._services = services

    def raw_store(self, backend: RedisBackend) -> RedisRawStore:
        return RedisRawStore(backend.client(), backend.key_prefix)

    def stop_server(self, backend: RedisBackend) -> None:
        services, name = self.service_of(backend)
        services.stop(name)

    def start_server(self, backend: RedisBackend) -> None:
        services, name = self.service_of(backend)
        services.start(name)

    def service_of(self, backend: RedisBackend) -> tuple[TestServices, str]:
        """The test services and the name of the one serving ``backend`` (:class:`SideChannelUnavailable`: none)."""
        try:
            services = self._services if self._services is not None else checkout_services(__file__)
        except FileNotFoundError as error:
            raise SideChannelUnavailable(f"no test servers to stop: {error}") from None
        settings = services.settings()
        if backend.options.cluster:
            name = "redis-cluster"
            served = {parse_node(node, name) for node in settings["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")}
        else:
            name = "redis"
            url = urlsplit(settings["HICACHE_TEST_REDIS_URL"])
            served = {(url.hostname or "", url.port or 0)}
        addresses = server_addresses(backend.options)
        if not served.intersection(addresses):
            raise SideChannelUnavailable(
                f"the outage hooks stop only the test servers of {services.root} (scripts/services); "
                f"the backend connects to {_shown(addresses)}, not to its {name} ({_shown(sorted(served))})"
            )
        return services, name


def _shown(addresses: list[tuple[str, int]]) -> str:
    return ", ".join(f"{host}:{port}" for host, port in addresses)
