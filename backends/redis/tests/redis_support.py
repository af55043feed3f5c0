"""Helpers of the redis backend tests: the test servers of this checkout (scripts/services), the stored records."""

from __future__ import annotations

from hicache_storage_redis import RedisBackend
from hicache_storage_redis.conformance import RedisHooks
from hicache_storage_redis.raw_store import RedisRawStore

from hicache_storage import HiCacheStorage
from hicache_storage.testing.fixtures import checkout_services

__all__ = ["SERVICES", "control", "raw_store", "settings"]

SERVICES = checkout_services(__file__)
settings = SERVICES.settings
control = SERVICES.control


def raw_store(storage: HiCacheStorage) -> RedisRawStore:
    """The stored records of ``storage`` (storage key → bytes), through the conformance hook."""
    backend = storage.backend
    assert isinstance(backend, RedisBackend)
    return RedisHooks().raw_store(backend)
