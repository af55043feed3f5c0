"""Collects per-test outcomes from an in-process pytest run and renders the report (rich, JSON).

A failing test's row names the rule it checks, the first failed check as "what: expected ...;
got ...", and, for the model-based test, the shrunk falsifying steps. The JSON carries the same
fields and the full traceback. A skipped test's row names its reason; the summary lists every
skipped category with what would enable it, and the skip policy's verdict.

Failures that share a cause come first, one line per group (:func:`failure_groups`): the tests
that break the same rule, and the tests whose first failed check went the same way (a broken
backend whose writes all fail shows as one line "N tests: expected [True, …]; got [False, …]").
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import skips
from .categories import CATEGORIES, category_of, rule_of

__all__ = [
    "Collector",
    "TestResult",
    "explain",
    "failure_groups",
    "falsifying_steps",
    "render",
    "summary_line",
    "write_json",
]

#: Modules whose bare ``assert`` statements pytest rewrites (to show the values) when not yet imported.
REWRITTEN = ("hicache_storage_conformance.suite", "hicache_storage_conformance.hybrid")
_STYLE = {"PASS": "green", "FAIL": "bold red", "SKIP": "yellow"}


@dataclass
class TestResult:
    """One test's outcome.

    ``reason`` is the skip reason or the first failed check; ``rule`` the contract rule the test
    checks; ``expected``/``actual`` and ``steps`` (the model test's shrunk falsifying program) when
    known; ``traceback`` the full failure text; ``skip_kind``/``enable`` why a skip happened and what
    would enable the test.
    """

    nodeid: str
    category: str
    test: str
    outcome: str = "PASS"
    reason: str = ""
    rule: str = ""
    expected: str = ""
    actual: str = ""
    steps: list[str] = field(default_factory=list)
    traceback: str = ""
    skip_kind: str = ""
    enable: str = ""
    duration: float = 0.0


def falsifying_steps(exc: BaseException) -> list[str]:
    """The steps of a Hypothesis falsifying example attached to ``exc`` (its notes), without ``state.``."""
    notes = [str(note) for note in getattr(exc, "__notes__", []) or []]
    lines = [line for note in notes for line in note.splitlines()]
    if "Falsifying example:" not in lines:
        return []
    steps: list[str] = []
    for line in lines[lines.index("Falsifying example:") + 1 :]:
        text = line.strip()
        if not text.startswith("state."):
            if steps:
                break
            continue
        if text.startswith("state.teardown("):
            continue
        steps.append(text.removeprefix("state."))
    return steps


def explain(exc: BaseException) -> dict[str, Any]:
    """The message, expected, actual, rule and steps of a failure's exception."""
    group = getattr(exc, "exceptions", None)
    if isinstance(group, tuple) and group and all(isinstance(e, BaseException) for e in group):  # an ExceptionGroup
        inner = explain(group[0])
        inner["reason"] = f"{inner['reason']} (and {len(group) - 1} more failures)"
        return inner
    out: dict[str, Any] = {"steps": falsifying_steps(exc)}
    what = getattr(exc, "what", None)
    if isinstance(exc, AssertionError) and isinstance(what, str):
        out.update(
            reason=str(exc.args[0]) if exc.args else what,
            expected=str(getattr(exc, "expected", "")),
            actual=str(getattr(exc, "actual", "")),
            rule=str(getattr(exc, "rule", "")),
        )
        return out
    if isinstance(exc, pytest.fail.Exception):
        out["reason"] = str(exc.msg)
        return out
    if isinstance(exc, AssertionError):
        text = str(exc).strip()
        first = text.split("\nassert ", 1)[0].strip() if not text.startswith("assert ") else text.splitlines()[0]
        out["reason"] = first or "assertion failed"
        return out
    out["reason"] = f"{type(exc).__name__} escaped: {exc}"
    return out


def _fallback_text(report: pytest.TestReport) -> str:
    text = report.longreprtext or ""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if lines:
        return lines[0].removeprefix("Failed: ")
    stripped = [line.strip() for line in text.splitlines() if line.strip()]
    return stripped[-1] if stripped else "failed"


def _skip_text(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class Collector:
    """pytest plugin: records category, rule and outcome of every test that runs."""

    def __init__(self) -> None:
        self.results: dict[str, TestResult] = {}
        #: Tests collected (more than ran when the run stopped early).
        self.collected = 0
        self._meta: dict[str, tuple[str, str, str]] = {}
        self._explained: dict[str, dict[str, Any]] = {}

    def pytest_configure(self, config: pytest.Config) -> None:
        # Bare asserts in the suite's own modules show their values when first imported from here on.
        fresh = [name for name in REWRITTEN if name not in sys.modules]
        if fresh:
            pytest.register_assert_rewrite(*fresh)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.collected = len(items)
        for item in items:
            cls = getattr(item, "cls", None)
            function = getattr(item, "function", None)
            name = getattr(function, "__name__", item.name)
            category = (category_of(cls, name) if cls is not None else None) or "other"
            display = item.name.removeprefix(f"test_{category}_").removeprefix("test_")
            self._meta[item.nodeid] = (category, display, rule_of(function))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.excinfo is not None and report.failed and item.nodeid not in self._explained:
            self._explained[item.nodeid] = explain(call.excinfo.value)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        category, display, rule = self._meta.get(report.nodeid, ("other", report.nodeid, ""))
        result = self.results.setdefault(report.nodeid, TestResult(report.nodeid, category, display, rule=rule))
        result.duration += report.duration
        if report.failed:
            if result.outcome != "FAIL":
                found = self._explained.get(report.nodeid, {})
                prefix = "" if report.when == "call" else f"error in {report.when}: "
                result.outcome = "FAIL"
                result.reason = prefix + str(found.get("reason") or _fallback_text(report))
                result.expected = str(found.get("expected", ""))
                result.actual = str(found.get("actual", ""))
                result.rule = str(found.get("rule") or rule)
                result.steps = list(found.get("steps", []))
                result.traceback = report.longreprtext
        elif report.skipped and result.outcome != "FAIL":
            props = dict(report.user_properties)
            result.outcome, result.reason = "SKIP", _skip_text(report)
            result.skip_kind = str(props.get(skips.PROPERTY_KIND, skips.OTHER))
            result.enable = str(props.get(skips.PROPERTY_ENABLE, ""))

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

    def skipped_categories(self) -> dict[str, dict[str, Any]]:
        """Per category with skips: how many of its tests skipped, and each distinct reason with its kind
        and what would enable it."""
        out: dict[str, dict[str, Any]] = {}
        for category, results in self.by_category().items():
            skipped = [r for r in results if r.outcome == "SKIP"]
            if not skipped:
                continue
            reasons: dict[str, dict[str, Any]] = {}
            for result in skipped:
                entry = reasons.setdefault(
                    result.reason,
                    {"reason": result.reason, "kind": result.skip_kind, "enable": result.enable, "tests": []},
                )
                entry["tests"].append(result.test)
            out[category] = {"skipped": len(skipped), "of": len(results), "reasons": list(reasons.values())}
        return out

    def violations(self, policy: skips.SkipPolicy | None) -> list[dict[str, str]]:
        """Skips ``policy`` does not accept (and required categories that did not run)."""
        if policy is None:
            return []
        out: list[dict[str, str]] = []
        for result in self.results.values():
            if result.outcome != "SKIP":
                continue
            why = policy.violation(result.category, result.skip_kind or skips.OTHER)
            if why:
                out.append({"test": f"{result.category}/{result.test}", "kind": result.skip_kind, "why": why})
        ran = {result.category for result in self.results.values()}
        for category in policy.require:
            if category not in ran:
                out.append({"test": category, "kind": "", "why": f"category {category} is required but did not run"})
        return out


_SAME_FLAGS = re.compile(r"\[(True|False|None)(?:, \1)*\]")
#: Most groups shown at the top of the report.
GROUPS_SHOWN = 6


def _symptom(result: TestResult) -> str:
    """The first failed check with its subject left out and uniform lists folded (``[False, …]``)."""
    if result.expected or result.actual:
        text = f"expected {result.expected}; got {result.actual}"
    else:
        text = result.reason
    return _SAME_FLAGS.sub(r"[\1, …]", text)


def failure_groups(results: list[TestResult]) -> list[dict[str, Any]]:
    """Groups of two or more failures that share a cause, largest first: ``kind`` (``symptom``: the same
    outcome of the first failed check; ``rule``: the same broken rule), ``cause``, ``count``, ``tests``."""
    failed = [r for r in results if r.outcome == "FAIL"]
    keyed: dict[tuple[str, str], list[TestResult]] = {}
    for result in failed:
        keyed.setdefault(("symptom", _symptom(result)), []).append(result)
        if result.rule:
            keyed.setdefault(("rule", result.rule), []).append(result)
    groups = [
        {"kind": kind, "cause": cause, "count": len(members), "tests": [f"{r.category}/{r.test}" for r in members]}
        for (kind, cause), members in keyed.items()
        if len(members) >= 2
    ]
    return sorted(groups, key=lambda group: (-group["count"], group["kind"] != "symptom"))


def _render_groups(console: Console, groups: list[dict[str, Any]], failed: int) -> None:
    if not groups:
        return
    console.print(Text(f"{failed} failed; failures that share a cause (most first):", style="bold red"))
    for group in groups[:GROUPS_SHOWN]:
        what = "break one rule: " if group["kind"] == "rule" else ""
        first = group["tests"][0]
        cause = group["cause"] if len(group["cause"]) <= 200 else group["cause"][:199] + "…"
        console.print(Text(f"  {group['count']} tests {what}{cause} (e.g. {first})"), soft_wrap=True)
    if len(groups) > GROUPS_SHOWN:
        console.print(Text(f"  ... {len(groups) - GROUPS_SHOWN} smaller groups in the tables below"))


def summary_line(counts: dict[str, int]) -> str:
    """``N passed, N failed, N skipped``."""
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


def _cell(result: TestResult) -> Text:
    if result.outcome != "FAIL":
        return Text(result.reason)
    lines = []
    if result.rule:
        lines.append(f"rule: {result.rule}")
    lines.append(result.reason)
    if result.steps:
        lines.append("falsifying steps (shrunk): " + " → ".join(result.steps))
    return Text("\n".join(lines))


def render(
    console: Console, header: dict[str, Any], collector: Collector, policy: skips.SkipPolicy | None = None
) -> None:
    """Header, one table per category, the skipped categories, the policy's verdict, then the summary line."""
    top = Table(title="hicache-storage conformance", show_header=False, title_justify="left")
    top.add_column("field", style="bold")
    top.add_column("value")
    fields = ("backend", "class", "entry_point", "distribution", "version", "api_version", "tier", "suite_version")
    for name in fields:
        top.add_row(name.replace("_", " "), Text(str(header.get(name) if header.get(name) is not None else "-")))
    overrides = header.get("capability_overrides", {})
    caps = ", ".join(
        f"{name}={value!r}" + (f" (overridden: {overrides[name]!r})" if name in overrides else "")
        for name, value in header.get("capabilities", {}).items()
    )
    top.add_row("capabilities", Text(caps))
    if header.get("hooks"):
        top.add_row("hooks", Text(str(header["hooks"])))
    if policy is not None:
        top.add_row("skip policy", Text(policy.describe()))
    console.print(top)
    results = list(collector.results.values())
    _render_groups(console, failure_groups(results), collector.counts()["failed"])
    for category, results in collector.by_category().items():
        table = Table(title=category, title_justify="left", expand=False)
        table.add_column("test", no_wrap=True)
        table.add_column("result")
        table.add_column("rule broken / reason")
        for result in results:
            style = _STYLE[result.outcome]
            table.add_row(Text(result.test), Text(result.outcome, style=style), _cell(result))
        console.print(table)
    skipped = collector.skipped_categories()
    if skipped:
        console.print(Text("skipped categories:", style="bold"))
        for category, entry in skipped.items():
            for reason in entry["reasons"]:
                count = len(reason["tests"])
                line = f"  {category} ({count} of {entry['of']} tests, {reason['kind'] or 'other'}): {reason['reason']}"
                console.print(Text(line))
                if reason["enable"]:
                    console.print(Text(f"      to enable: {reason['enable']}"))
    violations = collector.violations(policy)
    if violations:
        console.print(Text(f"skip policy ({policy.describe() if policy else ''}): FAILED", style="bold red"))
        for item in violations:
            console.print(Text(f"  {item['test']}: {item['why']}"))
    console.print(summary_line(collector.counts()), markup=False, highlight=False)


def write_json(
    path: Path, header: dict[str, Any], collector: Collector, policy: skips.SkipPolicy | None = None
) -> None:
    """Machine-readable report."""
    violations = collector.violations(policy)
    payload = {
        "header": header,
        "summary": collector.counts(),
        "failure_groups": failure_groups(list(collector.results.values())),
        "skipped_categories": collector.skipped_categories(),
        "policy": {
            **(
                {"profile": policy.profile, "require": list(policy.require), "fail_on_skip": policy.fail_on_skip}
                if policy
                else {}
            ),
            "violations": violations,
            "ok": not violations,
        },
        "results": [asdict(result) for results in collector.by_category().values() for result in results],
    }
    path.write_text(json.dumps(payload, indent=2, default=str))
