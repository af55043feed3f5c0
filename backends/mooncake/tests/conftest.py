"""Fixtures: the real mooncake_master (and segment holder) on 127.0.0.1 started through scripts/services,
and private servers the fault tests may kill."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_mooncake import MooncakeBackend
from mooncake_support import client_options, ensure_running

from hicache_storage.testing.fault_figures import figures_summary
from hicache_storage.testing.fixtures import BackendFactory
from hicache_storage.testing.outage import PrivateServices


@pytest.fixture(scope="session")
def mooncake() -> None:
    ensure_running()


@pytest.fixture
def open_backend(mooncake: None) -> Iterator[BackendFactory]:
    """Factory: ``open_backend(options=None, pool=None)``; every backend is cleared and closed afterwards."""
    factory = BackendFactory(MooncakeBackend, client_options)
    yield factory
    factory.close()


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    """Servers private to one test module (started on demand by the tests, stopped afterwards)."""
    owned = PrivateServices()
    try:
        yield owned
    finally:
        owned.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the figures the fault tests measured."""
    lines = figures_summary()
    if lines:
        terminalreporter.write_sep("-", "mooncake fault figures")
        for line in lines:
            terminalreporter.write_line(line)
