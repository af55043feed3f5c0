"""The conformance suite against the slab backend: default; single-threaded, fsync, O_DIRECT, 2-way; tiny."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance


class _SlabTarget(BackendConformance):
    """Stopping the server points every slab descriptor at a directory: each ``pread``/``pwrite`` fails."""

    backend = "slab"

    def stop_server(self, backend: Any) -> None:
        dead = os.open(str(backend.root), os.O_RDONLY)
        saved: dict[int, int] = {}
        try:
            for file in backend.slab_files():
                for fd in file.descriptors():
                    saved[fd] = os.dup(fd)
                    os.dup2(dead, fd, inheritable=False)
        finally:
            os.close(dead)
        self._saved = saved

    def start_server(self, backend: Any) -> None:
        for fd, copy in self._saved.items():
            os.dup2(copy, fd, inheritable=False)
            os.close(copy)
        self._saved = {}


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
