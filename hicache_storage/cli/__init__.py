"""Command-line entry point ``hicache-storage``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    from .commands import run

    return run(sys.argv[1:] if argv is None else argv)
