"""Figures the reliability tests measure, kept for the terminal summary and the docs' fault table."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .outage import TimedWorkload

__all__ = [
    "FAULT_ROWS",
    "FIGURES",
    "call_limit_s",
    "fault_table",
    "figures_summary",
    "record",
    "record_fault_row",
    "write_summary",
]

#: Figures measured by the tests (name → value), printed in pytest's terminal summary.
FIGURES: dict[str, object] = {}


def record(name: str, value: object) -> None:
    """Keep a measured figure for the summary (rounded floats)."""
    FIGURES[name] = round(value, 4) if isinstance(value, float) else value


#: One row per (backend, fault) measured by the deadline tests, for the table in docs/reliability.md.
FAULT_ROWS: list[dict[str, Any]] = []


def record_fault_row(
    backend: str, fault: str, *, deadline_s: float, workload: TimedWorkload, recovery_s: float | None, **extra: Any
) -> dict[str, Any]:
    """Keep the figures of one fault phase: worst call against the deadline, wrong pages, recovery."""
    worst, what = workload.worst_call()
    row = {
        "backend": backend,
        "fault": fault,
        "deadline_s": deadline_s,
        "worst_call_s": round(worst, 4),
        "worst_call": what,
        "over_deadline_s": round(worst - deadline_s, 4),
        "calls": len(workload.calls),
        "wrong_pages": workload.report.wrong_pages,
        "recovery_s": None if recovery_s is None else round(recovery_s, 3),
        **extra,
    }
    FAULT_ROWS.append(row)
    return row


def call_limit_s(row: dict[str, Any], slack_s: float = 0.1) -> float:
    """The longest call a fault row may show: its deadline, ``slack_s``, and twice the worst thread wake-up
    delay measured beside the workload (``scheduling_lag_s``, 0 when the row has none): on a loaded
    machine a call that met its deadline can still return that late."""
    return float(row["deadline_s"]) + slack_s + 2 * float(row.get("scheduling_lag_s") or 0.0)


def fault_table(rows: Sequence[dict[str, Any]]) -> str:
    """The markdown table of ``rows`` (as :func:`record_fault_row` keeps them)."""
    lines = [
        "| backend | fault | deadline | worst call | over the deadline | calls | wrong pages | recovery |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        recovery = "n/a" if row["recovery_s"] is None else f"{row['recovery_s']:.2f} s"
        lines.append(
            f"| {row['backend']} | {row['fault']} | {row['deadline_s']:.2f} s | {row['worst_call_s'] * 1000:.0f} ms "
            f"({row['worst_call']}) | {row['over_deadline_s'] * 1000:+.0f} ms | {row['calls']} | "
            f"{row['wrong_pages']} | {recovery} |"
        )
    return "\n".join(lines)


def figures_summary() -> list[str]:
    """Lines for pytest's terminal summary: the recorded figures, then the fault table (empty when none)."""
    lines: list[str] = []
    if FIGURES:
        lines += [f"{name}: {value}" for name, value in sorted(FIGURES.items())]
    if FAULT_ROWS:
        lines += ["", fault_table(FAULT_ROWS)]
    return lines


def write_summary(terminalreporter: Any, figures: Mapping[str, object], rows: Sequence[dict[str, Any]]) -> None:
    """Print the measured figures and the fault table in pytest's terminal summary (and save them when asked).

    ``HICACHE_RELIABILITY_FIGURES=path.json`` saves the named figures; ``HICACHE_FAULT_TABLE=path.json``
    saves the rows of the deadline tests (``tests/reliability/fault_table.py`` renders them).
    """
    if rows:
        terminalreporter.write_sep("-", "worst call per backend and fault")
        terminalreporter.write_line(fault_table(rows))
        table = os.environ.get("HICACHE_FAULT_TABLE")
        if table:
            Path(table).write_text(json.dumps(list(rows), indent=2) + "\n")
    if not figures:
        return
    terminalreporter.write_sep("-", "reliability figures")
    for name in sorted(figures):
        terminalreporter.write_line(f"{name}: {figures[name]}")
    target = os.environ.get("HICACHE_RELIABILITY_FIGURES")
    if target:
        Path(target).write_text(json.dumps(dict(figures), indent=2, sort_keys=True, default=str) + "\n")
