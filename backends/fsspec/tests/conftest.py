"""Fixtures: the fsspec backend on memory://, a local directory and s3fs on a real S3 server (moto)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fsspec_support import control, make_pool, s3_client, s3_storage_options, settings
from hicache_storage_fsspec import FsspecBackend

from hicache_storage import HostKVPool, make_config


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    return settings()


@pytest.fixture(scope="session")
def bucket(env: dict[str, str]) -> str:
    control("start", "s3")
    name = f"hc-fs-{secrets.token_hex(4)}"
    s3_client(env).create_bucket(Bucket=name)  # type: ignore[attr-defined]
    return name


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
def open_backend() -> Iterator[Any]:
    """Factory: ``open_backend(options, pool=None)``; every backend is cleared and closed afterwards."""
    opened: list[FsspecBackend] = []

    def factory(options: dict[str, Any], pool: HostKVPool | None = None, model: str = "m") -> FsspecBackend:
        backend = FsspecBackend(make_config(model, extra_config=options))
        backend.register_mem_pool_host(pool if pool is not None else make_pool())
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        if not backend.closed:
            backend.clear()
            backend.close()
