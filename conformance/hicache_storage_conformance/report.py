"""Collects per-test outcomes from an in-process pytest run and renders the report (rich, JSON)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from .base import CATEGORIES, category_of

__all__ = ["Collector", "TestResult", "render", "summary_line", "write_json"]

_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}


@dataclass
class TestResult:
    """One test's outcome; ``reason`` is the skip reason or the first line of the failure."""

    nodeid: str
    category: str
    test: str
    outcome: str = "PASS"
    reason: str = ""
    duration: float = 0.0


def _failure_text(report: pytest.TestReport) -> str:
    text = report.longreprtext or ""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if lines:
        first = lines[0]
        if first.startswith("Failed: "):
            first = first[len("Failed: ") :]
        return first
    stripped = [line.strip() for line in text.splitlines() if line.strip()]
    return stripped[-1] if stripped else "failed"


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class Collector:
    """pytest plugin: records category and outcome of every test that runs."""

    def __init__(self) -> None:
        self.results: dict[str, TestResult] = {}
        self._meta: dict[str, tuple[str, str]] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            cls = getattr(item, "cls", None)
            function = getattr(item, "function", None)
            name = getattr(function, "__name__", item.name)
            category = (category_of(cls, name) if cls is not None else None) or "other"
            display = item.name.removeprefix(f"test_{category}_").removeprefix("test_")
            self._meta[item.nodeid] = (category, display)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        category, display = self._meta.get(report.nodeid, ("other", report.nodeid))
        result = self.results.setdefault(report.nodeid, TestResult(report.nodeid, category, display))
        result.duration += report.duration
        if report.failed:
            if result.outcome != "FAIL":
                prefix = "" if report.when == "call" else f"error in {report.when}: "
                result.outcome, result.reason = "FAIL", prefix + _failure_text(report)
        elif report.skipped and result.outcome != "FAIL":
            result.outcome, result.reason = "SKIP", _skip_text(report)

    def counts(self) -> dict[str, int]:
        """Passed, failed and skipped totals."""
        values = list(self.results.values())
        return {
            "passed": sum(r.outcome == "PASS" for r in values),
            "failed": sum(r.outcome == "FAIL" for r in values),
            "skipped": sum(r.outcome == "SKIP" for r in values),
        }

    def by_category(self) -> dict[str, list[TestResult]]:
        """Results grouped by category, in report order."""
        order = {name: index for index, name in enumerate(CATEGORIES)}
        grouped: dict[str, list[TestResult]] = {}
        for result in sorted(self.results.values(), key=lambda r: order.get(r.category, len(order))):
            grouped.setdefault(result.category, []).append(result)
        return grouped


def summary_line(counts: dict[str, int]) -> str:
    """``N passed, N failed, N skipped``."""
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def render(console: Console, header: dict[str, Any], collector: Collector) -> None:
    """Header, one table per category, then the summary line."""
    top = Table(title="hicache-storage conformance", show_header=False, title_justify="left")
    top.add_column("field", style="bold")
    top.add_column("value")
    for field in ("backend", "class", "entry_point", "distribution", "version", "api_version", "tier", "suite_version"):
        top.add_row(field.replace("_", " "), str(header.get(field) if header.get(field) is not None else "-"))
    overrides = header.get("capability_overrides", {})
    caps = ", ".join(
        f"{name}={value!r}" + (f" (overridden: {overrides[name]!r})" if name in overrides else "")
        for name, value in header.get("capabilities", {}).items()
    )
    top.add_row("capabilities", caps)
    console.print(top)
    for category, results in collector.by_category().items():
        table = Table(title=category, title_justify="left", expand=False)
        table.add_column("test", no_wrap=True)
        table.add_column("result")
        table.add_column("reason")
        for result in results:
            style = _STYLE[result.outcome]
            table.add_row(result.test, f"[{style}]{result.outcome}[/{style}]", result.reason)
        console.print(table)
    console.print(summary_line(collector.counts()), markup=False, highlight=False)


def write_json(path: Path, header: dict[str, Any], collector: Collector) -> None:
    """Machine-readable report."""
    payload = {
        "header": header,
        "summary": collector.counts(),
        "results": [asdict(result) for results in collector.by_category().values() for result in results],
    }
    path.write_text(json.dumps(payload, indent=2, default=str))
