"""Fixtures: a real S3 server (moto) on 127.0.0.1 started through scripts/services."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_s3 import S3Backend
from s3_support import SERVICES, s3_options, settings

from hicache_storage.testing.fixtures import BackendFactory, fresh_s3_bucket


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket_name(env: dict[str, str]) -> str:
    return fresh_s3_bucket(SERVICES, env, "hc-test")


@pytest.fixture
def bucket(env: dict[str, str], bucket_name: str) -> str:
    """A bucket on the test server, there for each test: the server keeps no state across restarts, and
    an outage test on this worker may have restarted it since the bucket was first made."""
    SERVICES.start("s3")
    SERVICES.s3_bucket(bucket_name, env, exist_ok=True)
    return bucket_name


@pytest.fixture
def open_backend(env: dict[str, str], bucket: str) -> Iterator[BackendFactory[S3Backend]]:
    """Factory: ``open_backend(options=None, pool=None)`` under a fresh prefix; cleared and closed afterwards."""
    factory = BackendFactory(S3Backend, lambda: {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}"})
    yield factory
    factory.close()
