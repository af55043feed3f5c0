"""Running a benchmark script as its users do, on a few pages, and reading what it wrote.

The smoke tests judge that a script completes, reports every figure it promises, records the
machine and removes what it created; never the figures themselves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hicache_storage.testing.fixtures import checkout_services

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
SERVICES = checkout_services(__file__)


def run_script(
    script: str, *args: str, timeout_s: float = 150, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<script>`` with this interpreter; fails the test unless it exits 0."""
    command = [str(BENCHMARKS / script)] if script.endswith(".sh") else [sys.executable, str(BENCHMARKS / script)]
    if script.endswith(".sh"):
        command.insert(0, "bash")
    done = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def run_json(script: str, *args: str, out: Path, **kwargs: Any) -> dict[str, Any]:
    """Run a script that takes ``--json PATH`` and return what it wrote there."""
    run_script(script, *args, "--json", str(out), **kwargs)
    result: dict[str, Any] = json.loads(out.read_text())
    assert_machine(result)
    return result


def assert_machine(result: Mapping[str, Any]) -> None:
    """The results record the versions, CPUs and load of the run."""
    machine = result["machine"]
    assert machine["cpus"] >= 1 and machine["usable_cpus"] >= 1 and machine["cpu_model"]
    assert "hicache-storage" in machine["versions"] and "python" in machine["versions"]
    assert len(machine["load_average"]) in (0, 3)


def services_env(*names: str) -> dict[str, str]:
    """Start the named test servers (idempotent) and return their connection settings."""
    SERVICES.start(*names)
    return SERVICES.settings()


def left_behind(directory: Path, *allowed: Path) -> list[Path]:
    """What is in ``directory`` besides ``allowed``."""
    return sorted(path for path in directory.iterdir() if path not in allowed)
