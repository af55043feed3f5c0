"""Fixtures: a real S3 server (moto) on 127.0.0.1 started through scripts/services."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_s3 import S3Backend
from s3_support import SERVICES, control, s3_options, settings

from hicache_storage import HostKVPool
from hicache_storage.testing import close_backends, make_backend


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket(env: dict[str, str]) -> str:
    """A fresh bucket on the test server (the server keeps no state across restarts)."""
    control("start", "s3")
    name = f"hc-test-{secrets.token_hex(4)}"
    SERVICES.s3_bucket(name, env)
    return name


@pytest.fixture
def open_backend(env: dict[str, str], bucket: str) -> Iterator[Any]:
    """Factory: ``open_backend(options, pool=None)``; every backend is cleared and closed afterwards."""
    opened: list[S3Backend] = []

    def factory(options: dict[str, Any] | None = None, pool: HostKVPool | None = None, model: str = "m") -> S3Backend:
        extra = {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}", **(options or {})}
        opened.append(make_backend(S3Backend, extra, pool, model=model))
        return opened[-1]

    yield factory
    close_backends(opened)
