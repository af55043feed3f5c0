"""Makes the test helpers importable; prints the figures the fault tests measured."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage.testing.pytest_fixtures import services, write_figures  # noqa: F401 (a fixture)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The figures this backend's fault tests measured."""
    write_figures(terminalreporter, "file backend: reliability figures", prefix="file.")
