"""``Guard``: the resilience policy around each batch call; a fault becomes misses / ``False``, counted once.

With a :class:`~hicache_storage.resilience.ResiliencePolicy` each call runs under its deadline,
retries and per-direction breaker (the policy counts faults); without one a fault is counted here.
Either way no exception from below reaches the caller of a batch primitive. Operator primitives
(``list_stored``, ``clear_pages``) are not batch calls and pass through unguarded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..capabilities import Capabilities
from ..page_buffers import PageBuffers
from ..plugin.backend import Backend
from ..pools.context import BatchContext
from ..resilience import ResiliencePolicy
from ..stats import StorageStats
from .batch_layer import BatchCall, BatchLayer

__all__ = ["Guard"]


class Guard(BatchLayer):
    """Runs batch calls under ``policy`` (``None``: no deadline or retries) and absorbs their faults."""

    def __init__(
        self, inner: Backend[Any], capabilities: Capabilities, stats: StorageStats, policy: ResiliencePolicy | None
    ) -> None:
        super().__init__(inner, capabilities)
        self.stats = stats
        self.policy = policy

    def run(
        self, op: str, call: BatchCall, keys: Sequence[str], pages: Sequence[PageBuffers] | None, context: BatchContext
    ) -> list[bool]:
        try:
            if self.policy is not None:
                return self.policy.call(op, lambda: call(keys, pages), idempotent=True)
            return call(keys, pages)
        except Exception as error:  # faults never escape a batch call
            if self.policy is None:
                self.stats.fault(op, error)
            return [False] * len(keys)
