"""Fixtures: the real mooncake_master (and segment holder) on 127.0.0.1 started through scripts/services."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_mooncake import MooncakeBackend
from mooncake_support import client_options, ensure_running, make_pool

from hicache_storage import HostKVPool, make_config


@pytest.fixture(scope="session")
def mooncake() -> None:
    ensure_running()


@pytest.fixture
def open_backend(mooncake: None) -> Iterator[Any]:
    """Factory: ``open_backend(options=None, pool=None)``; every backend is cleared and closed afterwards."""
    opened: list[MooncakeBackend] = []

    def factory(
        options: dict[str, Any] | None = None, pool: HostKVPool | None = None, model: str = "m"
    ) -> MooncakeBackend:
        backend = MooncakeBackend(make_config(model, extra_config=client_options(**(options or {}))))
        backend.register_mem_pool_host(pool if pool is not None else make_pool())
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        if not backend.closed:
            backend.clear()
            backend.close()
