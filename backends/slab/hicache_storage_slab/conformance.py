"""Test-only hooks of the slab backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``slab``, so
``hicache-storage conformance slab`` runs every category, faults and integrity included:

- ``read_stored`` / ``write_stored`` / ``delete_stored``: through :class:`~hicache_storage_slab.SlotStore`,
  the record a read would use (header, then page bytes), by storage key;
- ``stop_server(backend)`` / ``start_server(backend)``: every descriptor of the backend's slab files
  is pointed at a directory (``dup2``), so each ``pread``/``pwrite``/``preadv``/``pwritev`` fails as on
  a dead drive, then pointed back. Header stores need a header read first, so they stop too.
"""

from __future__ import annotations

import os

from .backend import SlabBackend
from .raw_store import SlotStore

__all__ = ["SlabHooks"]


class SlabHooks:
    """The side channel and the outage hooks of :class:`~hicache_storage_slab.SlabBackend`."""

    def __init__(self) -> None:
        self._saved: dict[int, dict[int, int]] = {}  # id(backend) -> {descriptor: its saved copy}

    def read_stored(self, backend: SlabBackend, storage_key: str) -> bytes | None:
        return SlotStore(backend).get(storage_key)

    def write_stored(self, backend: SlabBackend, storage_key: str, data: bytes) -> None:
        SlotStore(backend)[storage_key] = data

    def delete_stored(self, backend: SlabBackend, storage_key: str) -> None:
        SlotStore(backend).pop(storage_key)

    def stop_server(self, backend: SlabBackend) -> None:
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

    def start_server(self, backend: SlabBackend) -> None:
        for fd, copy in self._saved.pop(id(backend), {}).items():
            os.dup2(copy, fd, inheritable=False)
            os.close(copy)
