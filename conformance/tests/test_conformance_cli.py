"""The CLI: report layout, exit statuses, JSON and JUnit output, selection and overrides."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hicache_storage_conformance.cli import main

from hicache_storage import API_VERSION

HERE = Path(__file__).resolve().parent
REFERENCE = "hicache_storage_conformance.reference:MemoryBackend"
REFERENCE_HOOKS = "hicache_storage_conformance.reference:MemoryHooks"


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from hicache_storage_conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=HERE
    )


def test_passing_backend_report_json_and_junit(tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    done = run_cli(
        REFERENCE, "--only", "lifecycle", "--only", "batch,eviction", "--json", str(report), "--junitxml", str(junit)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for text in ("api version", "suite version", "capabilities", "lifecycle", "batch", "eviction"):
        assert text in out
    assert "capability may_evict not declared" in out
    assert re.search(r"^13 passed, 0 failed, 1 skipped$", out, re.MULTILINE), out[-400:]
    data = json.loads(report.read_text())
    assert data["summary"] == {"passed": 13, "failed": 0, "skipped": 1}
    assert {r["category"] for r in data["results"]} == {"lifecycle", "batch", "eviction"}
    assert data["header"]["api_version"] == API_VERSION
    cases = ET.parse(junit).getroot().iter("testcase")
    assert len(list(cases)) == 14


def test_failing_backend_exits_1_and_names_the_test() -> None:
    done = run_cli("conformance_mutants:PrefixAsTotal", "--only", "batch")
    assert done.returncode == 1
    assert "FAIL" in done.stdout and "exists_counts_leading_run" in done.stdout
    assert re.search(r"^\d+ passed, 1 failed, 0 skipped$", done.stdout, re.MULTILINE)


def test_capability_override_switches_tests_off() -> None:
    done = run_cli(REFERENCE, "--only", "persistence", "--capability-override", "persistent=false")
    assert done.returncode == 0
    assert "capability persistent not declared" in done.stdout
    assert "overridden: False" in done.stdout


def test_multi_pool_runs_by_default_and_is_gated_by_its_capability(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    done = run_cli(REFERENCE, "--only", "multi_pool", "--json", str(report))
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(report.read_text())
    assert data["header"]["capabilities"]["multi_pool"] is True
    assert {r["category"] for r in data["results"]} == {"multi_pool"}
    assert data["summary"]["failed"] == 0 and data["summary"]["passed"] >= 25, data["summary"]
    off = run_cli(REFERENCE, "--only", "multi_pool", "--capability-override", "multi_pool=false", "--json", str(report))
    assert off.returncode == 0
    assert re.search(r"^0 passed, 0 failed, \d+ skipped$", off.stdout, re.MULTILINE), off.stdout[-400:]
    reasons = {r["reason"] for r in json.loads(report.read_text())["results"]}
    assert reasons == {"capability multi_pool not declared"}, reasons


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["no-such-backend"], "no backend named 'no-such-backend'"),
        (["no_such_module:Thing"], "cannot import backend class"),
        ([REFERENCE, "--only", "nonsense"], "unknown categories ['nonsense']"),
        ([REFERENCE, "--config", "{not json"], "--config: not valid JSON"),
        ([REFERENCE, "--config", "[1]"], "expected a JSON object"),
        ([REFERENCE, "--capability-override", "fast=true"], "unknown capability"),
        ([REFERENCE, "--capability-override", "persistent=maybe"], "expected true or false"),
        ([REFERENCE, "--max-examples", "0"], "--max-examples: must be >= 1"),
        ([REFERENCE, "--config", "@/no/such/file.json"], "cannot read"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "backend" in capsys.readouterr().err
