"""The conformance suite against the file backend (default, single-threaded + fsync, size-limited)."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance


class _FileTarget(BackendConformance):
    """Stopping the server takes the storage directory away, as an unmounted share would."""

    backend = "file"

    def stop_server(self, backend: Any) -> None:
        root = str(backend.root)
        os.rename(root, root + ".offline")
        with open(root, "wb"):  # a plain file where the directory was: every path below it fails
            pass

    def start_server(self, backend: Any) -> None:
        root = str(backend.root)
        os.unlink(root)
        os.rename(root + ".offline", root)


class TestFileConformance(_FileTarget):
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages"}


class TestFileConformanceSingleThread(_FileTarget):
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "io_threads": 1, "fanout_levels": 0, "fsync": True}


class TestFileConformanceSizeLimited(_FileTarget):
    """``max_bytes`` set: ``may_evict`` is declared and the eviction tests run."""

    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "max_bytes": 64 * 1024}
