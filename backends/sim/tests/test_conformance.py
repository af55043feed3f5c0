"""The conformance suite against the sim backend: private store, shared named store, capacity."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, ClassVar

from hicache_storage_conformance import BackendConformance


class TestSimConformance(BackendConformance):
    backend = "sim"
    config: ClassVar[dict[str, Any]] = {}


class TestSimSharedStoreConformance(BackendConformance):
    """A named store: instances share pages, so persistence and sharing tests run too."""

    backend = "sim"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {"store": f"conformance-{uuid.uuid4().hex}"}


class TestSimCapacityConformance(BackendConformance):
    """``capacity_bytes`` set: ``may_evict`` is declared and the eviction tests run."""

    backend = "sim"
    config: ClassVar[dict[str, Any]] = {"capacity_bytes": 64 * 1024}
