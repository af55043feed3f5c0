"""Mode ``buffer_only``: the reference :class:`~hicache_storage.pipeline.BufferOnlyPipeline` as the host tier.

Loads go through ``prefetch`` → ``tick`` → ``admit``; backups through ``enqueue_backup`` → ``tick``.
The replay is sequential, so each operation is ticked to completion before the request ends. The
device cache owns every device page; the slots a load will fill are handed back to the device pool
just before ``admit`` allocates them, and the admitted pages join the device cache.
"""

from __future__ import annotations

from collections import Counter

from ..interface import HiCacheStorage
from ..pipeline import BufferOnlyPipeline, DeviceKVPool, PipelineConfig, PrefetchRequest, PrefetchState, Span
from ..pipeline.device_pool import pages_to_tokens
from .kvdata import PageView, matching_prefix
from .tiers import LoadOutcome

__all__ = ["BufferOnlyTier"]

_MAX_TICKS = 10_000


class BufferOnlyTier:
    """Host memory as staging only, driven through the reference pipeline."""

    def __init__(
        self, device: PageView, device_pool: DeviceKVPool, backend: HiCacheStorage, *, host_ratio: float
    ) -> None:
        self.device = device
        self.device_pool = device_pool
        config = PipelineConfig(host_memory_mode="buffer_only", host_to_device_ratio=host_ratio)
        self.pipeline = BufferOnlyPipeline(config, device_pool, backend)
        self.host_pool_pages = self.pipeline.host_pool.page_num
        self.gate_drops: Counter[str] = Counter()
        self.corrupt_pages = 0
        self._requests = 0
        self._spans = 0

    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        """Prefetch the pages after the device prefix and admit them into ``device_slots`` (reordered)."""
        page_size = self.device_pool.page_size
        wanted = hashes[: start + len(device_slots)]
        if start >= len(wanted):
            return LoadOutcome()
        self._requests += 1
        request_id = f"r{self._requests}"
        self.pipeline.prefetch(PrefetchRequest(request_id, wanted, splice_point=start * page_size))
        for _ in range(_MAX_TICKS):
            self.pipeline.tick()
            status = self.pipeline.prefetch_status(request_id)
            if status is None or status.state not in (PrefetchState.QUERYING, PrefetchState.PARKED):
                break
        status = self.pipeline.prefetch_status(request_id)
        if status is None or status.state is not PrefetchState.STAGED:
            self.pipeline.abort(request_id)
            return LoadOutcome()
        staged = min(status.staged_pages, len(device_slots))
        self.device_pool.free(pages_to_tokens(device_slots[:staged], page_size))
        admission = self.pipeline.admit(request_id, start * page_size)
        pages = admission.device_indices[::page_size].div(page_size, rounding_mode="floor").tolist()
        if sorted(pages) != sorted(device_slots[: len(pages)]) or len(pages) > staged:
            raise RuntimeError("the pipeline admitted pages other than the device slots handed back to it")
        leftover = device_slots[len(pages) : staged]
        if leftover:  # handed back but not used: take them again for the device cache
            self._reclaim(leftover)
        device_slots[: len(pages)] = pages
        good = matching_prefix(self.device, pages, list(admission.hashes))
        self.corrupt_pages += len(pages) - good
        return LoadOutcome(storage_pages=good)

    def _reclaim(self, slots: list[int]) -> None:
        tokens = self.device_pool.alloc(len(slots) * self.device_pool.page_size, owner="cache")
        if tokens is None:
            raise RuntimeError("device pool lost pages")

    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        """Offer the computed pages as one span and tick until its result is polled."""
        if begin >= end:
            return
        self._spans += 1
        span = Span(
            span_id=self._spans,
            hashes=hashes[begin:end],
            device_indices=pages_to_tokens(device_slots[: end - begin], self.device_pool.page_size),
            parent_hash=hashes[begin - 1] if begin > 0 else None,
        )
        decision = self.pipeline.enqueue_backup(span)
        if decision.gate is not None:
            self.gate_drops[decision.gate] += end - begin
            return
        if decision.value != "admitted":
            self.gate_drops[decision.value] += end - begin
            return
        for _ in range(_MAX_TICKS):
            self.pipeline.tick()
            if any(result.span_id == span.span_id for result in self.pipeline.poll_backups()):
                return
        raise RuntimeError(f"backup span {span.span_id} did not finish in {_MAX_TICKS} ticks")
