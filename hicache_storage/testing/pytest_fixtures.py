"""Pytest pieces of the outage kit, for a plugin's ``conftest.py``::

from hicache_storage.testing.pytest_fixtures import services, write_figures  # noqa: F401 (a fixture)

def pytest_terminal_summary(terminalreporter):
    write_figures(terminalreporter, "redis fault figures", prefix="redis.")
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .outage import PrivateServices

__all__ = ["services"]


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    """Test servers private to one test module, on ports of their own (the tests may stop them); stopped after it."""
    owned = PrivateServices()
    try:
        yield owned
    finally:
        owned.close()
