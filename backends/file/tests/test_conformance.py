"""The conformance suite against the file backend (default, single-threaded + fsync, size-limited)."""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.hooks import find_target
from hicache_storage_file.conformance import FileTarget


class _FileTarget(BackendConformance):
    """The registered hooks: stopping the server takes the storage directory away."""

    backend = "file"
    conformance_target = FileTarget


class TestFileConformance(_FileTarget):
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages"}


class TestFileConformanceSingleThread(_FileTarget):
    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "io_threads": 1, "fanout_levels": 0, "fsync": True}


class TestFileConformanceSizeLimited(_FileTarget):
    """``max_bytes`` set: ``may_evict`` is declared and the eviction tests run."""

    config: ClassVar[dict[str, Any]] = {"path": "{tmp}/pages", "max_bytes": 512 * 1024}  # blocks counted: ~100 pages


def test_the_hooks_are_registered_under_the_backend_name() -> None:
    hooks, source = find_target("file")
    assert source == "entry point hicache_storage.conformance_targets:file"
    assert isinstance(getattr(hooks, "inner", None), FileTarget)
