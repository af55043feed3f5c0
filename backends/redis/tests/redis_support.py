"""Helpers of the redis backend tests: the test servers of this checkout (scripts/services), the stored records."""

from __future__ import annotations

from hicache_storage_redis import RedisBackend
from hicache_storage_redis.conformance import RedisHooks
from hicache_storage_redis.raw_store import RedisRawStore

from hicache_storage import HiCacheStorage
from hicache_storage.testing.fixtures import checkout_services

__all__ = ["CLUSTER_RESILIENCE", "SERVICES", "control", "raw_store", "settings"]

#: Resilience of the suite runs over a cluster. The first call of a cluster instance also builds the
#: client (slot map, connections): up to 0.76 s in 1 build of 20 (load average 10 on 2 cores), more
#: over TLS, so with the suite's 0.5 s deadline for injected faults the write made before each fault
#: at times failed. These runs give every call 2 s, as the suite's outage tests do.
CLUSTER_RESILIENCE = {
    "deadline_s": 2.0,
    "retries": 1,
    "backoff_s": 0.001,
    "backoff_max_s": 0.01,
    "breaker_reset_s": 0.05,
}

SERVICES = checkout_services(__file__)
settings = SERVICES.settings
control = SERVICES.control


def raw_store(storage: HiCacheStorage) -> RedisRawStore:
    """The stored records of ``storage`` (storage key → bytes), through the conformance hook."""
    backend = storage.backend
    assert isinstance(backend, RedisBackend)
    return RedisHooks().raw_store(backend)
