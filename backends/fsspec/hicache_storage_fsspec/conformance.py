"""Test-only hooks of the fsspec backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``fsspec``: the stored
records through :class:`~hicache_storage_fsspec.raw_store.FsspecRawStore` (the backend's own
filesystem, behind its back). There is no outage hook: the backend cannot stop the service behind
its filesystem, so a test that owns its server adds ``stop_server``/``start_server`` of its own.
"""

from __future__ import annotations

from .backend import FsspecBackend
from .raw_store import FsspecRawStore

__all__ = ["FsspecHooks"]


class FsspecHooks:
    """The side channel of :class:`FsspecBackend`: its page files as a mapping storage key → record bytes."""

    def raw_store(self, backend: FsspecBackend) -> FsspecRawStore:
        return FsspecRawStore(backend.fs, backend.path_for, backend.page_files)
