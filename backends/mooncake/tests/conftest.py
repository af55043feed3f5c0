"""Fixtures: the real mooncake_master (and segment holder) on 127.0.0.1 started through scripts/services,
and private servers the fault tests may kill."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_mooncake import MooncakeBackend
from mooncake_support import client_options, ensure_running

from hicache_storage.testing.fixtures import BackendFactory
from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)


@pytest.fixture(scope="session")
def mooncake() -> None:
    ensure_running()


@pytest.fixture
def open_backend(mooncake: None) -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options=None, pool=None)``; every backend is cleared and closed afterwards."""
    factory = BackendFactory(MooncakeBackend, client_options)
    yield factory
    factory.close()
