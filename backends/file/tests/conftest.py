"""Makes the test helpers importable; prints the figures the fault tests measured."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage.testing.fault_figures import figures_summary

#: Prefix of the figures this backend's fault tests record.
_OURS = "file."


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The file backend's measured figures (those of other test directories are theirs to print)."""
    lines = [line for line in figures_summary() if line.startswith(_OURS)]
    if lines:
        terminalreporter.write_sep("-", "file backend: reliability figures")
        for line in lines:
            terminalreporter.write_line(line)
