"""The suite passes the reference backend, used as a plugin's own test suite would use it."""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance
from hicache_storage_conformance.reference import MemoryBackend, MemoryHooks


class TestReferenceBackend(BackendConformance):
    backend = MemoryBackend
    hooks = MemoryHooks
    config: ClassVar[dict[str, Any]] = {"store": "reference-tests"}


class TestReferenceEvicting(BackendConformance):
    """With a small capacity the reference evicts: misses are fine, wrong bytes are not."""

    backend = "hicache_storage_conformance.reference:MemoryBackend"
    hooks = MemoryHooks
    config: ClassVar[dict[str, Any]] = {"store": "reference-evicting", "capacity_pages": 96}
    max_examples = 10
