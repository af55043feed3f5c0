"""Fixtures: the checkout's Redis test servers (scripts/services), and private ones tests may stop."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_redis import RedisBackend
from redis_support import control, settings

from hicache_storage.testing.fixtures import BackendFactory
from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def redis_url(env: dict[str, str]) -> str:
    control("start", "redis")
    return env["HICACHE_TEST_REDIS_URL"]


@pytest.fixture(scope="session")
def cluster_nodes(env: dict[str, str]) -> list[str]:
    control("start", "redis-cluster")
    return env["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")


@pytest.fixture
def open_backend() -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options, pool=None)`` (a ``HiCacheStorage`` over the redis backend) under a
    fresh key prefix; cleared and closed afterwards."""
    factory = BackendFactory(RedisBackend, lambda: {"key_prefix": f"t{secrets.token_hex(4)}:"})
    yield factory
    factory.close()
