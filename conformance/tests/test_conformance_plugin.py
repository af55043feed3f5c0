"""The pytest plugin: the suite beside a project's own tests, inert unless --hicache-backend is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REFERENCE = "hicache_storage_conformance.reference:MemoryBackend"


#: The file backend by module path: found without the conformance target its entry point registers.
HOOKLESS_FILE = "hicache_storage_file:FileBackend"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_mine.py").write_text("def test_my_own_check():\n    assert 1 + 1 == 2\n")
    return tmp_path


def pytest_in(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HICACHE_CONFORMANCE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rfs", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=project)  # noqa: PLW1510


def test_inert_without_the_option(project: Path) -> None:
    done = pytest_in(project, "-q")
    assert done.returncode == 0, done.stdout
    assert "1 passed" in done.stdout and "deselected" not in done.stdout
    assert "--hicache-backend" in pytest_in(project, "--help").stdout


def test_suite_runs_beside_own_tests(project: Path) -> None:
    done = pytest_in(project, "-v", "--hicache-backend", REFERENCE, "--hicache-only", "lifecycle,zero_copy")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "test_mine.py::test_my_own_check PASSED" in done.stdout
    assert "test_selected.py::TestLifecycle::test_lifecycle_construct_and_use PASSED" in done.stdout
    assert "6 passed, 2 skipped" in done.stdout, done.stdout[-600:]


def test_strict_profile_fails_a_missing_hook_with_what_enables_it(project: Path) -> None:
    # by module path, the file backend comes without the outage hooks its entry point registers
    args = ["-q", "--hicache-backend", HOOKLESS_FILE, "--hicache-config", '{"path": "{tmp}/p"}']
    args += ["--hicache-only", "faults"]
    done = pytest_in(project, *args, "--hicache-profile", "strict")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "1 failed" in done.stdout and "test_faults_server_stopped_then_restarted" in done.stdout
    assert "does not accept" in done.stdout and "To enable: give the suite a fault hook" in done.stdout
    assert pytest_in(project, *args).returncode == 0


def test_backend_that_cannot_be_built_is_one_failure(project: Path) -> None:
    done = pytest_in(project, "-q", "--hicache-backend", "file")
    assert done.returncode == 1
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]
    assert "test_backend_can_be_built" in done.stdout and "extra_config.path" in done.stdout


def test_bad_option_is_a_usage_error(project: Path) -> None:
    done = pytest_in(project, "--hicache-backend", "sim", "--hicache-config", "{oops")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--hicache-config: not valid JSON" in done.stderr
