"""Fixtures: the checkout's shared S3 server (moto) for most tests, a private one for tests that stop it."""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_s3 import S3Backend
from s3_support import SERVICES, s3_client, s3_options, settings

from hicache_storage.testing.fixtures import BackendFactory, fresh_s3_bucket
from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket_name(env: dict[str, str]) -> Iterator[str]:
    """A fresh bucket on the test server, removed at the end: the tests leave nothing in it."""
    name = fresh_s3_bucket(SERVICES, env, "hc-test")
    yield name
    client = s3_client(env)
    with contextlib.suppress(client.exceptions.NoSuchBucket):  # the server was restarted meanwhile
        client.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(env: dict[str, str], bucket_name: str) -> str:
    """A bucket on the test server, there for each test: the server keeps no state across restarts, and
    an outage test on this worker may have restarted it since the bucket was first made."""
    SERVICES.start("s3")
    SERVICES.s3_bucket(bucket_name, env, exist_ok=True)
    return bucket_name


@pytest.fixture
def open_backend(env: dict[str, str], bucket: str) -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options=None, pool=None)`` under a fresh prefix; cleared and closed afterwards."""
    factory = BackendFactory(S3Backend, lambda: {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}"})
    yield factory
    factory.close()
