"""The conformance suite against the file backend (default, single-threaded + fsync, size-limited)."""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.hooks import find_hooks
from hicache_storage_file.conformance import FileHooks


class TestFileConformance(BackendConformance):
    """The registered hooks: page files through the layout; stopping the server takes the directory away."""

    backend = "file"
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages"}


class TestFileConformanceSingleThread(BackendConformance):
    backend = "file"
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "io_threads": 1, "fanout_levels": 0, "fsync": True}


class TestFileConformanceSizeLimited(BackendConformance):
    """``max_bytes`` set: ``may_evict`` is declared and the eviction tests run."""

    backend = "file"
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "max_bytes": 512 * 1024}  # blocks counted: ~100 pages


def test_the_hooks_are_registered_under_the_backend_name() -> None:
    hooks, source = find_hooks("file")
    assert source == "entry point hicache_storage.conformance_hooks:file"
    assert isinstance(getattr(hooks, "inner", None), FileHooks)
    assert "read_stored" in hooks.describe() and "stop_server" in hooks.describe()
