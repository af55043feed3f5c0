"""The layout rules of docs/architecture.md: import layers and cycles (import-linter), module size."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Shipped code: the core, every plugin's package and the conformance suite.
SHIPPED = [
    ROOT / "hicache_storage",
    *sorted(ROOT.glob("backends/*/hicache_storage_*")),
    ROOT / "conformance/hicache_storage_conformance",
]
MAX_MODULE_LINES = 600


def test_import_contracts_are_kept() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.fail("lint-imports (import-linter) is not installed: scripts/setup.sh installs it")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-2000:]


def test_contracts_cover_every_plugin() -> None:
    """A new plugin package must join the contracts (root packages, independence, cycles)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text[text.index("[tool.importlinter]") :]
    for package in SHIPPED[1:]:
        assert f'"{package.name}"' in section, f"{package.name} is missing from [tool.importlinter]"


@pytest.mark.parametrize("package", SHIPPED, ids=lambda p: p.name)
def test_no_module_over_the_size_limit(package: Path) -> None:
    assert package.is_dir(), package
    too_long = {
        str(path.relative_to(ROOT)): count
        for path in package.rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them): {too_long}"
