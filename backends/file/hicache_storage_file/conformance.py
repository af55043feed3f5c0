"""Test-only hooks of the file backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``file``, so
``hicache-storage conformance file`` runs every category, faults included. The stored records are
the page files, reached through the backend's ``layout``; the outage takes the storage directory
away, as an unmounted share would: it is renamed aside and a plain file put in its place, so every
path below it fails, then restored.
"""

from __future__ import annotations

import os
from pathlib import Path

from .backend import FileBackend

__all__ = ["FileHooks"]

_ASIDE = ".offline"


class FileHooks:
    """The side channel and the outage hooks of :class:`~hicache_storage_file.FileBackend`."""

    @staticmethod
    def path_for(backend: FileBackend, storage_key: str) -> Path:
        """The page file that holds (or would hold) the page of ``storage_key``."""
        return Path(backend.layout.path_for(storage_key))

    def read_stored(self, backend: FileBackend, storage_key: str) -> bytes | None:
        try:
            return self.path_for(backend, storage_key).read_bytes()
        except FileNotFoundError:
            return None

    def write_stored(self, backend: FileBackend, storage_key: str, data: bytes) -> None:
        path = self.path_for(backend, storage_key)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_bytes(data)

    def delete_stored(self, backend: FileBackend, storage_key: str) -> None:
        self.path_for(backend, storage_key).unlink(missing_ok=True)

    def stop_server(self, backend: FileBackend) -> None:
        root = str(backend.root)
        if os.path.exists(root + _ASIDE):
            return
        os.rename(root, root + _ASIDE)
        with open(root, "wb"):  # a plain file where the directory was
            pass

    def start_server(self, backend: FileBackend) -> None:
        root = str(backend.root)
        if not os.path.exists(root + _ASIDE):
            return
        os.unlink(root)
        os.rename(root + _ASIDE, root)
