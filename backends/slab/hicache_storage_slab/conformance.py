"""Test-only hooks of the slab backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_targets`` as ``slab``, so
``hicache-storage conformance slab`` runs every category, faults and integrity included:

- ``raw_store(backend)``: :meth:`SlabBackend.raw_store`, the record a read would use (header, then
  page bytes), by storage key;
- ``stop_server(backend)`` / ``start_server(backend)``: every descriptor of the backend's slab files
  is pointed at a directory (``dup2``), so each ``pread``/``pwrite``/``preadv``/``pwritev`` fails as on
  a dead drive, then pointed back. Header stores need a header read first, so they stop too.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any, ClassVar

__all__ = ["SlabTarget"]


class SlabTarget:
    """The conformance hooks for :class:`~hicache_storage_slab.SlabBackend` (no base class needed)."""

    backend: ClassVar[str] = "slab"

    def __init__(self) -> None:
        self._saved: dict[int, dict[int, int]] = {}  # id(backend) -> {descriptor: its saved copy}

    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        store: MutableMapping[str, bytes] = backend.raw_store()
        return store

    def stop_server(self, backend: Any) -> None:
        if id(backend) in self._saved:
            return
        dead = os.open(str(backend.root), os.O_RDONLY)
        saved: dict[int, int] = {}
        try:
            for file in backend.slab_files():
                for fd in file.descriptors():
                    saved[fd] = os.dup(fd)
                    os.dup2(dead, fd, inheritable=False)
        finally:
            os.close(dead)
            self._saved[id(backend)] = saved

    def start_server(self, backend: Any) -> None:
        for fd, copy in self._saved.pop(id(backend), {}).items():
            os.dup2(copy, fd, inheritable=False)
            os.close(copy)
