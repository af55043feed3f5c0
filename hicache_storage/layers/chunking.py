"""``Chunking``: splits every batch call into chunks of at most ``max_batch_size`` pages."""

from __future__ import annotations

from collections.abc import Sequence

from ..page_buffers import PageBuffers
from ..pools.context import BatchContext
from .batch_layer import BatchCall, BatchLayer

__all__ = ["Chunking"]


class Chunking(BatchLayer):
    """The layer below sees at most ``capabilities.max_batch_size`` keys per call, in order."""

    def run(
        self, op: str, call: BatchCall, keys: Sequence[str], pages: Sequence[PageBuffers] | None, context: BatchContext
    ) -> list[bool]:
        step = max(1, int(self.capabilities.max_batch_size or len(keys) or 1))
        if len(keys) <= step:
            return call(keys, pages)
        results: list[bool] = []
        for begin in range(0, len(keys), step):
            chunk_pages = pages[begin : begin + step] if pages is not None else None
            results.extend(call(keys[begin : begin + step], chunk_pages))
        return results
