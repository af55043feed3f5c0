"""The conformance suite against the slab backend: default; single-threaded, fsync, O_DIRECT; tiny."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.hooks import find_hooks
from hicache_storage_slab.conformance import SlabHooks


class TestSlabConformance(BackendConformance):
    """The registered hooks: pages through SlotStore; the outage points every data file descriptor at a
    directory and makes the index fail."""

    backend = "slab"
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/slab", "capacity_bytes": 16 << 20}


class TestSlabConformanceDurable(BackendConformance):
    """One I/O thread, payloads synced before the index commits, O_DIRECT requested, 64 KiB regions."""

    backend = "slab"
    config: ClassVar[dict[str, Any]] = {
        "path": "{tmp}/slab",
        "capacity_bytes": 8 << 20,
        "io_threads": 1,
        "fsync": True,
        "direct_io": True,
        "region_bytes": 64 << 10,
    }


class TestSlabConformanceTiny(BackendConformance):
    """The smallest store (8 MiB: an index of 64 pages), so the eviction tests see pages go."""

    backend = "slab"
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/slab", "capacity_bytes": 8 << 20}


def test_the_hooks_are_registered_under_the_backend_name() -> None:
    hooks, source = find_hooks("slab")
    assert source == "entry point hicache_storage.conformance_hooks:slab"
    assert isinstance(getattr(hooks, "inner", None), SlabHooks)
    assert "read_stored" in hooks.describe() and "stop_server" in hooks.describe()


CLI = "import sys; from hicache_storage.cli import main; sys.exit(main(sys.argv[1:]))"


def _allocated(root: Path) -> int:
    """Bytes of disk the files below ``root`` take (allocated blocks)."""
    total = 0
    for path in root.rglob("*"):
        try:
            total += path.lstat().st_blocks * 512
        except FileNotFoundError:
            continue
    return total


def test_the_suite_from_the_command_line_stays_within_capacity_and_leaves_nothing(tmp_path: Path) -> None:
    """``hicache-storage conformance slab --config '{"path": DIR}'`` (the default capacity, 1 GiB): every
    test passes, the disk below ``DIR`` (sampled every 20 ms) never exceeds the capacity, and nothing
    is left once it ends."""
    root = tmp_path / "slab"
    config = json.dumps({"path": str(root)})
    runner = subprocess.Popen(
        [sys.executable, "-c", CLI, "conformance", "slab", "--config", config],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = 0
    try:
        while runner.poll() is None:
            if root.exists():
                peak = max(peak, _allocated(root))
            time.sleep(0.02)
        out, err = runner.communicate(timeout=600)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 0, (out + err)[-3000:]
    assert " 0 failed" in out
    assert 0 < peak <= 1 << 30, f"disk below the path peaked at {peak} bytes (capacity 1 GiB)"
    assert sorted(p.name for p in root.iterdir()) == []
