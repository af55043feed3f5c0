"""Fixtures of the reliability tests: private servers on 127.0.0.1 that the tests may kill."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rel_support import FAULT_ROWS, FIGURES, WORKER_OUTPUT, PrivateServices, write_summary


@pytest.fixture(scope="module")
def services() -> Iterator[PrivateServices]:
    """Servers private to one test module (started on demand by the tests, stopped afterwards)."""
    owned = PrivateServices()
    try:
        yield owned
    finally:
        owned.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand the figures to the controller, which prints them (the root conftest)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None and (FIGURES or FAULT_ROWS):
        output[WORKER_OUTPUT] = json.loads(json.dumps({"figures": FIGURES, "rows": FAULT_ROWS}, default=str))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not hasattr(terminalreporter.config, "workerinput"):
        write_summary(terminalreporter, FIGURES, FAULT_ROWS)
