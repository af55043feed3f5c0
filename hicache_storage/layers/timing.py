"""``Timing``: per operation, the calls, pages, hits / stored pages, bytes moved and latency of each batch call."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..capabilities import Capabilities
from ..page_buffers import PageBuffers
from ..plugin.backend import Backend
from ..pools.context import BatchContext
from ..stats import StorageStats
from .batch_layer import BatchCall, BatchLayer

__all__ = ["Timing"]

#: Operations that move page bytes (the others count no bytes).
_MOVES = frozenset({"get", "set"})


class Timing(BatchLayer):
    """Records each batch call in ``stats`` (:meth:`~hicache_storage.stats.StorageStats.record`)."""

    def __init__(self, inner: Backend[Any], capabilities: Capabilities, stats: StorageStats) -> None:
        super().__init__(inner, capabilities)
        self.stats = stats

    def run(
        self, op: str, call: BatchCall, keys: Sequence[str], pages: Sequence[PageBuffers] | None, context: BatchContext
    ) -> list[bool]:
        begin = time.perf_counter()
        results = call(keys, pages)
        ok = sum(results)
        nbytes = ok * context.page_bytes if op in _MOVES else 0
        self.stats.record(
            op, pages=len(keys), ok=ok, nbytes=nbytes, seconds=time.perf_counter() - begin, pool=context.pool
        )
        return results
