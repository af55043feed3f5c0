"""The distributions: every sdist and wheel builds and passes ``twine check``; the wheels install
into a fresh virtual environment, outside this checkout, and work there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def entry_points() -> dict[str, str]:
    """Backend name -> distribution name, from each plugin's pyproject."""
    found = {}
    for pyproject in sorted(ROOT.glob("backends/*/pyproject.toml")):
        text = pyproject.read_text()
        name = re.search(r'^name = "([^"]+)"', text, re.M)
        entry = re.search(r'\[project.entry-points."hicache_storage.backends"\]\n(\w+) =', text)
        assert name and entry, pyproject
        found[entry.group(1)] = name.group(1)
    return found


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False, env=env, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("dists")
    dist = work / "dist"
    run(["bash", str(ROOT / "scripts" / "build-dists.sh"), str(dist)], ROOT)
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    run([*pip, "torch==2.13.0"], work)  # first, so nothing pulls another torch
    constraints = work / "constraints.txt"
    services = (ROOT / "scripts" / "services" / "requirements-services.txt").read_text().splitlines()
    constraints.write_text("\n".join(line for line in services if "[" not in line) + "\n")
    names = ["hicache-storage", "hicache-storage-conformance", *entry_points().values()]
    run([*pip, "--find-links", str(dist), "-c", str(constraints), *names], work)
    return dist, venv


def test_every_distribution_builds_an_sdist_and_a_wheel(fresh_env: tuple[Path, Path]) -> None:
    dist, _ = fresh_env
    built = {p.name for p in dist.iterdir()}
    for distribution in ["hicache-storage", "hicache-storage-conformance", *entry_points().values()]:
        stem = distribution.replace("-", "_")
        assert any(n.startswith(f"{stem}-") and n.endswith(".whl") for n in built), distribution
        assert any(n.startswith(f"{stem}-") and n.endswith(".tar.gz") for n in built), distribution


def test_the_wheels_install_and_list_every_plugin(fresh_env: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = fresh_env
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    rows = json.loads(run([str(venv / "bin" / "hicache-storage"), "backends", "--json"], tmp_path, env))
    listed = {row["name"]: row for row in rows}
    for name, distribution in entry_points().items():
        assert listed[name]["distribution"] == distribution and listed[name]["error"] is None
    modules = [distribution.replace("-", "_") for distribution in entry_points().values()]
    code = f"import importlib; print(*(importlib.import_module(m).__file__ for m in {modules!r}), sep=chr(10))"
    files = run([str(venv / "bin" / "python"), "-c", code], tmp_path, env).splitlines()
    assert len(files) == len(modules) and all(file.startswith(str(venv)) for file in files), files
    out = run([str(venv / "bin" / "hicache-storage"), "demo", "--pages", "64", "--batch", "32"], tmp_path, env)
    assert out.count("PASS") == 4  # file and sim, KV and hybrid
    assert "usage:" in run([str(venv / "bin" / "hicache-storage-conformance"), "--help"], tmp_path, env)
