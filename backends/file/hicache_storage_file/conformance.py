"""Test-only hooks of the file backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_targets`` as ``file``, so
``hicache-storage conformance file`` runs every category, faults included. The stored records are
reached through the backend's ``path_for`` (the suite's default); the outage takes the storage
directory away, as an unmounted share would: it is renamed aside and a plain file put in its place,
so every path below it fails, then restored.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

__all__ = ["FileTarget"]

_ASIDE = ".offline"


class FileTarget:
    """The outage hooks for :class:`~hicache_storage_file.FileBackend` (no base class needed)."""

    backend: ClassVar[str] = "file"

    def stop_server(self, backend: Any) -> None:
        root = str(backend.root)
        if os.path.exists(root + _ASIDE):
            return
        os.rename(root, root + _ASIDE)
        with open(root, "wb"):  # a plain file where the directory was
            pass

    def start_server(self, backend: Any) -> None:
        root = str(backend.root)
        if not os.path.exists(root + _ASIDE):
            return
        os.unlink(root)
        os.rename(root + _ASIDE, root)
