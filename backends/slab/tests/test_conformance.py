"""The conformance suite against the slab backend: default; single-threaded, fsync, O_DIRECT, 2-way; tiny."""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.hooks import find_target
from hicache_storage_slab.conformance import SlabTarget


class _SlabTarget(BackendConformance):
    """The registered hooks: stopping the server points every slab descriptor at a directory."""

    backend = "slab"
    conformance_target = SlabTarget


class TestSlabConformance(_SlabTarget):
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/slab", "capacity_bytes": 8 << 20}


class TestSlabConformanceDurable(_SlabTarget):
    """One I/O thread, ordered fsync per batch, O_DIRECT requested, two slots per set."""

    config: ClassVar[dict[str, Any]] = {
        "path": "{tmp}/slab",
        "capacity_bytes": 4 << 20,
        "io_threads": 1,
        "fsync": True,
        "direct_io": True,
        "ways": 2,
    }


class TestSlabConformanceTiny(_SlabTarget):
    """288 KiB, 64 ways: one set of 64 slots (fully associative), so the eviction tests see pages go."""

    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/slab", "capacity_bytes": 288 * 1024, "ways": 64}


def test_the_hooks_are_registered_under_the_backend_name() -> None:
    hooks, source = find_target("slab")
    assert source == "entry point hicache_storage.conformance_targets:slab"
    assert isinstance(getattr(hooks, "inner", None), SlabTarget)
