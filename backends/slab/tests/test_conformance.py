"""The conformance suite against the slab backend: default; single-threaded, fsync, O_DIRECT; tiny."""

from __future__ import annotations

import json
import subprocess
import sys
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


def test_the_suite_from_the_command_line_leaves_nothing_below_the_path(tmp_path: Path) -> None:
    """``hicache-storage conformance slab`` on a bare path: every test passes and no slab file is left."""
    root = tmp_path / "slab"
    config = json.dumps({"path": str(root), "capacity_bytes": 8 << 20})
    done = subprocess.run(
        [sys.executable, "-c", CLI, "conformance", "slab", "--config", config],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert " 0 failed" in done.stdout
    assert sorted(p.name for p in root.iterdir()) == []
