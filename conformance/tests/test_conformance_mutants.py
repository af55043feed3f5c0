"""The suite fails every deliberately broken backend, in the category meant to catch it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conformance_mutants import MUTANTS

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def sweep() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, str(HERE / "conformance_mutant_sweep.py"), "--expected-only"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


#: Mutants that a test needing no hook of the backend's must catch.
CAUGHT_BY = {
    "SwallowsWriteErrors": "faults/write_error_is_not_acknowledged",
    "SwallowsWriteErrorsNoHooks": "faults/write_error_is_not_acknowledged",
    "SwallowsReadErrors": "faults/read_error_is_a_miss",
    "CopiesThroughBytes": "zero_copy/no_page_sized_copies",
    "VisibleEarly": "concurrency/visible_only_when_complete",
}


def test_at_least_twelve_mutants() -> None:
    assert len(MUTANTS) >= 12


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_caught_by_its_own_test(sweep: dict[str, Any], name: str) -> None:
    assert CAUGHT_BY[name] in sweep[name]["failed"], sweep[name]


def test_visible_early_is_caught_every_time() -> None:
    """The visibility test polls the key being written: VisibleEarly fails it on every run."""
    from hicache_storage_conformance import selection
    from hicache_storage_conformance.gate import SUITE_MODULE
    from hicache_storage_conformance.report import Collector

    caught = 0
    for _ in range(5):
        selection.use(selection.Selection(backend="conformance_mutants:VisibleEarly", only=("concurrency",)))
        collector = Collector()
        args = [str(SUITE_MODULE), "-p", "no:cacheprovider", "-p", "no:terminal", "-o", "addopts="]
        args += ["-k", "visible_only_when_complete"]
        try:
            pytest.main(args, plugins=[collector])
        finally:
            selection.use(None)
        caught += [r.outcome for r in collector.results.values()] == ["FAIL"]
    assert caught == 5, f"caught in {caught} of 5 runs"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(sweep: dict[str, Any], name: str) -> None:
    row = sweep[name]
    assert row["rc"] == 1, f"{name} ({row['rule']}) passed the suite"
    assert any(test.startswith(f"{row['expected']}/") for test in row["failed"]), row
