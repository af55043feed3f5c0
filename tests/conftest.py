"""Fixtures for the core tests."""

from __future__ import annotations

import pytest
from core_support import MemoryBackend, make_pool

from hicache_storage import HiCacheStorage, HostKVPool, load_backend, make_config


@pytest.fixture
def pool() -> HostKVPool:
    return make_pool()


@pytest.fixture
def backend(pool: HostKVPool) -> HiCacheStorage:
    b = load_backend(MemoryBackend, make_config("m", extra_config={"resilience": False}))
    b.register_mem_pool_host(pool)
    return b
