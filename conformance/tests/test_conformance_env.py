"""Selection by environment variable: skipped with a reason when unset, runs the chosen backend when set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


#: The file backend by module path: found without the conformance target its entry point registers.
HOOKLESS_FILE = "hicache_storage_file:FileBackend"


def run_pytest(env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HICACHE_CONFORMANCE_")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "--pyargs", "hicache_storage_conformance.selected", "-q", "-rs"]
    command += ["-p", "no:cacheprovider", "-o", "addopts="]
    return subprocess.run(  # noqa: PLW1510
        command, capture_output=True, text=True, timeout=120, env=env, cwd=HERE
    )


def test_unset_skips_with_reason() -> None:
    done = run_pytest({})
    assert done.returncode == 0, done.stdout
    assert "no backend selected: set HICACHE_CONFORMANCE_BACKEND" in done.stdout
    assert " passed" not in done.stdout


def test_selected_backend_runs_only_requested_categories() -> None:
    done = run_pytest(
        {
            "HICACHE_CONFORMANCE_BACKEND": "hicache_storage_conformance.reference:MemoryBackend",
            "HICACHE_CONFORMANCE_CONFIG": '{"store": "env-test"}',
            "HICACHE_CONFORMANCE_ONLY": "lifecycle,delete",
        }
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert "6 passed" in done.stdout and "deselected" in done.stdout


def test_selected_mutant_fails() -> None:
    done = run_pytest(
        {"HICACHE_CONFORMANCE_BACKEND": "conformance_mutants:DeleteKeepsPages", "HICACHE_CONFORMANCE_ONLY": "delete"}
    )
    assert done.returncode == 1
    assert "test_delete_removes_only_named_pages" in done.stdout


def test_bad_config_fails_loudly() -> None:
    done = run_pytest(
        {"HICACHE_CONFORMANCE_BACKEND": "sim", "HICACHE_CONFORMANCE_CONFIG": "{oops", "HICACHE_CONFORMANCE_ONLY": ""}
    )
    assert done.returncode == 1
    assert "HICACHE_CONFORMANCE_CONFIG: not valid JSON" in done.stdout


def test_unbuildable_backend_is_one_failure() -> None:
    done = run_pytest({"HICACHE_CONFORMANCE_BACKEND": "file"})
    assert done.returncode == 1
    assert "1 failed" in done.stdout and "passed" not in done.stdout, done.stdout[-2000:]
    assert "extra_config.path" in done.stdout


def test_strict_profile_from_the_environment() -> None:
    done = run_pytest(
        {
            "HICACHE_CONFORMANCE_BACKEND": HOOKLESS_FILE,  # by module path: no registered outage hooks
            "HICACHE_CONFORMANCE_CONFIG": '{"path": "{tmp}/p"}',
            "HICACHE_CONFORMANCE_ONLY": "faults",
            "HICACHE_CONFORMANCE_PROFILE": "strict",
        }
    )
    assert done.returncode == 1
    assert "1 failed" in done.stdout and "does not accept" in done.stdout, done.stdout[-2000:]
