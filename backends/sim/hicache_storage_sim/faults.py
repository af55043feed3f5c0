"""Seeded fault injection: each operation draws from its own generator, so runs are reproducible."""

from __future__ import annotations

import random
import threading

from hicache_storage import BackendFault

__all__ = ["FaultInjector"]


class FaultInjector:
    """Raises :class:`BackendFault` for a call of ``op`` with that operation's probability.

    Each operation has a generator seeded from ``(seed, op)`` and drawn once per call, only when
    its rate is above zero: the n-th call of an operation fails or not independently of how many
    calls of other operations were made.
    """

    def __init__(self, rates: dict[str, float], seed: int) -> None:
        self._rates = {op: rate for op, rate in rates.items() if rate > 0}
        self._generators = {op: random.Random(f"{seed}:{op}") for op in self._rates}
        self._lock = threading.Lock()

    def check(self, op: str) -> None:
        """Raise :class:`BackendFault` if this call of ``op`` is chosen to fail."""
        rate = self._rates.get(op)
        if rate is None:
            return
        with self._lock:
            draw = self._generators[op].random()
        if draw < rate:
            raise BackendFault(f"injected {op} fault (rate {rate})")
