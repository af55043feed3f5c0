"""Choosing between two ways of making the same call by their measured cost on live calls.

Which of the client's read calls is faster depends on the machine and its load (measured on one
2-vCPU host: the plain multi-buffer get 5-15 % ahead of a get session when the host was idle, a
get session 10-15 % ahead at load 2 and about twice as fast at load 7), so the backend measures
both on its own traffic instead of fixing one.
"""

from __future__ import annotations

import threading

__all__ = ["FasterOf"]


class FasterOf:
    """Picks, call by call, the way with the lower recent cost per unit of work (thread-safe).

    Costs are exponentially weighted means of ``seconds / units`` (``weight`` on the newest sample).
    Until each way has ``warmup`` samples the ways take turns; after that the cheaper one runs and
    every ``probe_every``-th call runs the other, so a change of conditions is noticed.
    """

    def __init__(self, ways: tuple[str, str], *, warmup: int = 3, probe_every: int = 16, weight: float = 0.25):
        if ways[0] == ways[1]:
            raise ValueError(f"two different ways are needed, got {ways!r}")
        if warmup < 1 or probe_every < 2 or not 0 < weight <= 1:
            raise ValueError("warmup >= 1, probe_every >= 2 and 0 < weight <= 1 are needed")
        self.ways = ways
        self._warmup = warmup
        self._probe_every = probe_every
        self._weight = weight
        self._cost: dict[str, float | None] = dict.fromkeys(ways)
        self._samples = dict.fromkeys(ways, 0)
        self._calls = 0
        self._lock = threading.Lock()

    def pick(self) -> str:
        """The way the next call should take."""
        with self._lock:
            self._calls += 1
            first, second = self.ways
            if min(self._samples.values()) < self._warmup:
                return first if self._samples[first] <= self._samples[second] else second
            best, other = (first, second) if self._cost_of(first) <= self._cost_of(second) else (second, first)
            return other if self._calls % self._probe_every == 0 else best

    def record(self, way: str, seconds: float, units: float) -> None:
        """The cost of a call that took ``way`` and did ``units`` of work (nothing recorded for none)."""
        if units <= 0 or seconds < 0:
            return
        sample = seconds / units
        with self._lock:
            known = self._cost[way]
            self._cost[way] = sample if known is None else known + self._weight * (sample - known)
            self._samples[way] += 1

    def costs(self) -> dict[str, float | None]:
        """The current cost per unit of each way (``None`` before its first sample)."""
        with self._lock:
            return dict(self._cost)

    def _cost_of(self, way: str) -> float:
        cost = self._cost[way]
        return float("inf") if cost is None else cost
