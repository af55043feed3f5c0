"""A progress bar for a suite run on a terminal: tests done of those collected, the failures so far.

A pytest plugin: :class:`ProgressBar` starts a transient rich bar once collection is done and
advances it as each test finishes, so a run against a slow or broken backend is never silent. It
shows nothing when its console is not a terminal (logs, pipes, CI), where the report alone is printed.
"""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["ProgressBar"]


class ProgressBar:
    """pytest plugin: one bar over the collected tests, on ``console`` when it is a terminal."""

    def __init__(self, console: Console, backend: str) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self._backend = backend
        self._task: TaskID | None = None
        self._failed: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._progress.start()
        self._task = self._progress.add_task(f"conformance {self._backend}", total=len(session.items), failed=0)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self._task is None:
            return
        if report.failed and report.nodeid not in self._failed:
            self._failed.add(report.nodeid)
            self._progress.update(self._task, failed=len(self._failed))
        if report.when == "teardown":
            self._progress.advance(self._task)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._progress.stop()
