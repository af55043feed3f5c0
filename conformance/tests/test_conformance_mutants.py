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


def test_at_least_twelve_mutants() -> None:
    assert len(MUTANTS) >= 12


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(sweep: dict[str, Any], name: str) -> None:
    row = sweep[name]
    assert row["rc"] == 1, f"{name} ({row['rule']}) passed the suite"
    assert any(test.startswith(f"{row['expected']}/") for test in row["failed"]), row
