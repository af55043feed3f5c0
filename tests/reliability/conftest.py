"""Fixtures of the reliability tests: private servers on 127.0.0.1 that the tests may kill."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rel_support import FAULT_ROWS, FIGURES, PrivateServices, fault_table


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    """Servers private to one test module (started on demand by the tests, stopped afterwards)."""
    owned = PrivateServices()
    try:
        yield owned
    finally:
        owned.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the figures the reliability tests measured (and save them when asked to).

    ``HICACHE_RELIABILITY_FIGURES=path.json`` saves the named figures; ``HICACHE_FAULT_TABLE=path.json``
    saves the rows of the deadline tests (``tests/reliability/fault_table.py`` renders them).
    """
    if FAULT_ROWS:
        terminalreporter.write_sep("-", "worst call per backend and fault")
        terminalreporter.write_line(fault_table(FAULT_ROWS))
        table = os.environ.get("HICACHE_FAULT_TABLE")
        if table:
            Path(table).write_text(json.dumps(FAULT_ROWS, indent=2) + "\n")
    if not FIGURES:
        return
    terminalreporter.write_sep("-", "reliability figures")
    for name in sorted(FIGURES):
        terminalreporter.write_line(f"{name}: {FIGURES[name]}")
    target = os.environ.get("HICACHE_RELIABILITY_FIGURES")
    if target:
        Path(target).write_text(json.dumps(FIGURES, indent=2, sort_keys=True, default=str) + "\n")
