"""Pytest pieces of the outage kit, for a plugin's ``conftest.py``::

from hicache_storage.testing.pytest_fixtures import services, write_figures  # noqa: F401 (a fixture)

def pytest_terminal_summary(terminalreporter):
    write_figures(terminalreporter, "redis fault figures", prefix="redis.")
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .fault_figures import FAULT_ROWS, fault_table, figures_summary
from .outage import PrivateServices

__all__ = ["services", "write_figures"]


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    """Test servers private to one test module, on ports of their own (the tests may stop them); stopped after it."""
    owned = PrivateServices()
    try:
        yield owned
    finally:
        owned.close()


def write_figures(terminalreporter: Any, title: str, prefix: str = "") -> None:
    """Write the figures the tests recorded whose name starts with ``prefix``, and the fault-table rows of
    backends whose name does, under ``title``."""
    lines = [line for line in figures_summary() if line.startswith(prefix)]
    rows = [row for row in FAULT_ROWS if str(row["backend"]).startswith(prefix)]
    if rows:
        lines += ["", fault_table(rows)]
    if lines:
        terminalreporter.write_sep("-", title)
        for line in lines:
            terminalreporter.write_line(line)
