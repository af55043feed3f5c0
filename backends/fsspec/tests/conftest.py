"""Fixtures: the fsspec backend on memory://, a local directory and s3fs on a real S3 server (moto):
the checkout's shared one for most tests, a private one for tests that stop it."""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fsspec_support import SERVICES, s3_storage_options, settings
from hicache_storage_fsspec import FsspecBackend

from hicache_storage.testing import s3_client
from hicache_storage.testing.fixtures import BackendFactory, fresh_s3_bucket
from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket_name(env: dict[str, str]) -> Iterator[str]:
    """A fresh bucket on the test server, removed at the end: the tests leave nothing in it."""
    name = fresh_s3_bucket(SERVICES, env, "hc-fs")
    yield name
    client = s3_client(env)
    with contextlib.suppress(client.exceptions.NoSuchBucket):  # the server was restarted meanwhile
        client.delete_bucket(Bucket=name)


@pytest.fixture
def bucket(env: dict[str, str], bucket_name: str) -> str:
    """A bucket on the test server, there for each test (an outage test may have restarted the server)."""
    SERVICES.start("s3")
    SERVICES.s3_bucket(bucket_name, env, exist_ok=True)
    return bucket_name


@pytest.fixture(params=["memory", "local", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Backend options for one filesystem kind (``url`` plus ``storage_options``)."""
    tag = secrets.token_hex(4)
    if request.param == "memory":
        return {"url": f"memory://hicache-{tag}"}
    if request.param == "local":
        return {"url": f"file://{tmp_path}/cache"}
    env = request.getfixturevalue("env")
    bucket = request.getfixturevalue("bucket")
    return {"url": f"s3://{bucket}/{tag}", "storage_options": s3_storage_options(env)}


@pytest.fixture
def open_backend() -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options, pool=None)``; every storage is cleared and closed afterwards."""
    factory = BackendFactory(FsspecBackend)
    yield factory
    factory.close()
