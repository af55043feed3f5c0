"""What a backend author reads: rule, expected vs actual, falsifying steps, ids, JSON fields, JUnit classnames."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from test_conformance_cli import REFERENCE, run_cli


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], Path]:
    """One backend with one planted bug (an overwrite keeps the old bytes), through the CLI."""
    tmp = tmp_path_factory.mktemp("planted")
    report, junit = tmp / "r.json", tmp / "r.xml"
    done = run_cli(
        "conformance_mutants:StaleOverwrite",
        "--only",
        "overwrite,model,roundtrip",
        "--json",
        str(report),
        "--junitxml",
        str(junit),
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout, json.loads(report.read_text()), junit


def _flat(table: str) -> str:
    """The report's text with the table borders gone and wrapped cells joined (one line of words)."""
    return " ".join(table.replace("│", " ").replace("┃", " ").split())


def _row(data: dict[str, Any], test: str) -> dict[str, Any]:
    return next(r for r in data["results"] if f"{r['category']}/{r['test']}" == test)


def test_table_names_rule_expected_and_actual(planted: tuple[str, dict[str, Any], Path]) -> None:
    out = _flat(planted[0])
    assert "rule: overwrites: last write wins; writing a stored key again succeeds" in out
    assert "reading it after the overwrite, page 0 of 1" in out
    assert "expected version 2 of the key, byte-exact; got version 1 of the key (a stale or wrong version)" in out


def test_model_failure_shows_the_shrunk_steps(planted: tuple[str, dict[str, Any], Path]) -> None:
    out, data = _flat(planted[0]), planted[1]
    row = _row(data, "model/state_machine")
    assert row["outcome"] == "FAIL"
    assert row["steps"], row
    assert all(re.fullmatch(r"(write|read|exists|delete|clear)\(.*\)", step) for step in row["steps"]), row["steps"]
    assert any(step.startswith("write(") for step in row["steps"])
    assert "falsifying steps (shrunk): " + " → ".join(row["steps"]) in out
    assert "┃" not in row["reason"] and "+---" not in row["reason"], row["reason"]
    assert row["expected"] and row["actual"] and row["rule"]


def test_json_carries_fields_and_full_traceback(planted: tuple[str, dict[str, Any], Path]) -> None:
    _out, data, _junit = planted
    row = _row(data, "overwrite/new_bytes_win")
    assert row["expected"] == "version 2 of the key, byte-exact"
    assert row["actual"] == "version 1 of the key (a stale or wrong version)"
    assert "test_overwrite_new_bytes_win" in row["traceback"] and "Mismatch" in row["traceback"]
    assert row["rule"] == "overwrites: last write wins; writing a stored key again succeeds"
    passed = _row(data, "overwrite/same_page_again")
    assert passed["outcome"] == "PASS" and passed["rule"].startswith("Writing a key that is already stored")
    assert data["policy"] == {"violations": [], "ok": True}


def test_every_row_carries_its_parameter_id(planted: tuple[str, dict[str, Any], Path]) -> None:
    out, data = planted[0], planted[1]
    ids = [r["test"] for r in data["results"] if r["category"] == "roundtrip" and r["test"].startswith("pages")]
    assert len(ids) == 24 and len(set(ids)) == 24, ids
    for name in ("pages[mha-layer_first-bfloat16]", "pages[mla-page_first_direct-uint8]"):
        assert name in ids and name in out, name


def test_junit_classnames_are_per_category(planted: tuple[str, dict[str, Any], Path]) -> None:
    _out, _data, junit = planted
    names = {str(case.get("classname")).rsplit(".", 1)[-1] for case in ET.parse(junit).getroot().iter("testcase")}
    assert names == {"TestOverwrite", "TestModel", "TestRoundtrip"}, names


def test_backend_that_cannot_be_built_is_one_error() -> None:
    done = run_cli("file", "--only", "lifecycle,roundtrip")
    assert done.returncode == 2, done.stdout[-2000:]
    assert "extra_config.path" in done.stderr and "cannot be built from the config {}" in done.stderr
    assert done.stderr.count("error:") == 1, done.stderr
    assert "PASS" not in done.stdout and "FAIL" not in done.stdout
    assert "no test was run" in done.stderr


def test_skipped_categories_are_named_with_what_enables_them(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = run_cli(REFERENCE, "--only", "eviction,zero_copy,lifecycle", "--json", str(report))
    assert done.returncode == 0, done.stdout[-2000:]
    assert "skipped categories:" in done.stdout
    assert "eviction (1 of 1 tests, capability): capability may_evict not declared" in done.stdout
    assert "to enable: declare may_evict=True" in done.stdout
    skipped = json.loads(report.read_text())["skipped_categories"]
    assert set(skipped) == {"eviction", "zero_copy"}
    assert skipped["zero_copy"]["reasons"][0]["kind"] == "capability"
    assert "--capability-override zero_copy=true" in skipped["zero_copy"]["reasons"][0]["enable"]


def test_failures_of_one_cause_are_one_line_at_the_top(tmp_path: Path) -> None:
    """A backend whose every write fails: the failures fold into one line before the tables."""
    report = tmp_path / "broken.json"
    done = run_cli("sim", "--config", '{"fail_set_rate": 1.0}', "--only", "lifecycle,roundtrip", "--json", str(report))
    assert done.returncode == 1
    data = json.loads(report.read_text())
    failed = data["summary"]["failed"]
    top = data["failure_groups"][0]
    assert top["kind"] == "symptom" and top["cause"] == "expected [True, …]; got [False, …]"
    assert top["count"] >= failed / 2 and len(top["tests"]) == top["count"]
    head = done.stdout.split("lifecycle", 1)[0]  # everything printed before the first category's table
    assert f"{failed} failed; failures that share a cause" in head
    assert f"{top['count']} tests expected [True, …]; got [False, …]" in head


def test_failure_groups_by_rule_and_by_symptom() -> None:
    from hicache_storage_conformance.report import TestResult, failure_groups

    def failed(test: str, rule: str, expected: str, actual: str) -> TestResult:
        return TestResult(f"x::{test}", "batch", test, "FAIL", "r", rule, expected, actual)

    results = [
        failed("a", "rule 1", "[True, True]", "[False, False]"),
        failed("b", "rule 1", "b'x'", "None"),
        failed("c", "rule 2", "[True]", "[False]"),
        failed("d", "", "3", "0"),
        TestResult("x::e", "batch", "e"),
    ]
    groups = {(g["kind"], g["cause"]): g["tests"] for g in failure_groups(results)}
    assert groups == {
        ("rule", "rule 1"): ["batch/a", "batch/b"],
        ("symptom", "expected [True, …]; got [False, …]"): ["batch/a", "batch/c"],
    }


def test_fail_fast_stops_at_the_first_failure() -> None:
    done = run_cli("sim", "--config", '{"fail_set_rate": 1.0}', "--only", "lifecycle,roundtrip", "--fail-fast")
    assert done.returncode == 1
    assert re.search(r"^\d+ passed, 1 failed, 0 skipped$", done.stdout, re.MULTILINE), done.stdout[-500:]
    assert re.search(r"stopped at the first failure \(--fail-fast\): \d+ of \d+ tests ran", done.stdout)


def test_a_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    import io

    from hicache_storage_conformance.progress import ProgressBar
    from rich.console import Console

    (tmp_path / "test_three.py").write_text("def test_a(): pass\n\ndef test_b(): pass\n\ndef test_c(): assert 0\n")
    for terminal in (True, False):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=100)
        bar = ProgressBar(console, "demo")
        pytest.main([str(tmp_path), "-p", "no:terminal", "-p", "no:cacheprovider"], plugins=[bar])
        assert ("conformance demo" in out.getvalue() and "1 failed" in out.getvalue()) == terminal
