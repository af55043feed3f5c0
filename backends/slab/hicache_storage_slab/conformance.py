"""Test-only hooks of the slab backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``slab``, so
``hicache-storage conformance slab`` runs every category, faults and integrity included:

- ``read_stored`` / ``write_stored`` / ``delete_stored``: through :class:`~hicache_storage_slab.SlotStore`,
  the bytes in a page's slots, by storage key;
- ``stop_server(backend)`` / ``start_server(backend)``: every descriptor of the store's data files is
  pointed at a directory (``dup2``), so each ``preadv``/``pwritev`` fails as on a dead drive, and the
  index answers every call with ``EIO``; then both come back.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from .backend import SlabBackend
from .index import SlabIndex
from .raw_store import SlotStore

__all__ = ["SlabHooks"]


class _DeadIndex:
    """Stands in for the index of a store whose drive is gone: every call raises ``EIO``."""

    def __init__(self, index: SlabIndex) -> None:
        self.index = index
        self.env = index.env

    def __getattr__(self, name: str) -> Any:
        def fail(*args: object, **kwargs: object) -> None:
            raise OSError(errno.EIO, f"the slab index is unreachable ({name})")

        return fail


class SlabHooks:
    """The side channel and the outage hooks of :class:`~hicache_storage_slab.SlabBackend`."""

    def __init__(self) -> None:
        self._saved: dict[int, tuple[dict[int, int], SlabIndex | None]] = {}

    def read_stored(self, backend: SlabBackend, storage_key: str) -> bytes | None:
        return SlotStore(backend).get(storage_key)

    def write_stored(self, backend: SlabBackend, storage_key: str, data: bytes) -> None:
        SlotStore(backend)[storage_key] = data

    def delete_stored(self, backend: SlabBackend, storage_key: str) -> None:
        SlotStore(backend).pop(storage_key)

    def stop_server(self, backend: SlabBackend) -> None:
        if id(backend) in self._saved:
            return
        store = backend.store(create=False)
        dead = os.open(str(backend.root), os.O_RDONLY)
        saved: dict[int, int] = {}
        index: SlabIndex | None = None
        try:
            for file in backend.data_files():
                for fd in file.descriptors():
                    saved[fd] = os.dup(fd)
                    os.dup2(dead, fd, inheritable=False)
            if store is not None:
                index = store.opened.index
                store.opened.index = _DeadIndex(index)  # type: ignore[assignment]
        finally:
            os.close(dead)
            self._saved[id(backend)] = (saved, index)

    def start_server(self, backend: SlabBackend) -> None:
        saved, index = self._saved.pop(id(backend), ({}, None))
        for fd, copy in saved.items():
            os.dup2(copy, fd, inheritable=False)
            os.close(copy)
        store = backend.store(create=False)
        if store is not None and index is not None:
            store.opened.index = index
