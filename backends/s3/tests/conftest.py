"""Fixtures: the checkout's shared S3 server (moto) for most tests, a private one for tests that stop it."""

from __future__ import annotations

import contextlib
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_s3 import S3Backend
from s3_support import SERVICES, s3_client, s3_options, settings

from hicache_storage.testing.fixtures import BackendFactory, fresh_s3_bucket
from hicache_storage.testing.pytest_fixtures import services, write_figures  # noqa: F401 (a fixture)


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket(env: dict[str, str]) -> Iterator[str]:
    """A fresh bucket on the shared test server (never stopped by these tests), removed at the end:
    the tests leave nothing in it."""
    name = fresh_s3_bucket(SERVICES, env, "hc-test")
    yield name
    client = s3_client(env)
    with contextlib.suppress(client.exceptions.NoSuchBucket):  # the server was restarted meanwhile
        client.delete_bucket(Bucket=name)


@pytest.fixture
def open_backend(env: dict[str, str], bucket: str) -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options=None, pool=None)`` under a fresh prefix; cleared and closed afterwards."""
    factory = BackendFactory(S3Backend, lambda: {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}"})
    yield factory
    factory.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The figures this backend's fault tests measured."""
    write_figures(terminalreporter, "s3 backend: reliability figures", prefix="s3.")
