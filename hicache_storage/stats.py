"""Thread-safe operation counters behind ``get_stats()``."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from typing import Any

from .eviction_watch import EvictionWatch, logger

__all__ = ["StorageStats"]


class StorageStats:
    """Counters per operation (``exists``, ``get``, ``set``, ``delete``) plus named extras.

    Per operation: ``calls``, ``pages``, ``ok`` (hits / successful writes), ``failed`` (misses /
    failed writes), ``faults`` (exceptions from the backend), ``bytes`` and ``seconds``.
    A capacity-bound backend calls :meth:`watch_evictions`; its ``evictions`` are then judged against
    what it is given (:mod:`~hicache_storage.eviction_watch`).
    """

    _FIELDS = ("calls", "pages", "ok", "failed", "faults", "bytes", "seconds")
    #: Upper bounds (seconds) of the per-operation latency histogram; one more bucket counts the rest.
    LATENCY_BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(self._FIELDS, 0))
        self._extra: dict[str, float] = defaultdict(float)
        self._latency: dict[str, list[int]] = defaultdict(lambda: [0] * (len(self.LATENCY_BOUNDS) + 1))
        self.last_fault: str | None = None
        self._eviction_watch: EvictionWatch | None = None

    def watch_evictions(self, capacity_bytes: int, what: str) -> None:
        """Warn (log, rate-limited) and count ``eviction_pressure`` when ``evictions`` show the store,
        of ``capacity_bytes``, evicts most of what it is given; ``what`` names the backend and option."""
        with self._lock:
            self._eviction_watch = EvictionWatch(capacity_bytes, what)

    def record(self, op: str, *, pages: int, ok: int, nbytes: int = 0, seconds: float = 0.0, faults: int = 0) -> None:
        """Add one call's outcome."""
        with self._lock:
            row = self._ops[op]
            row["calls"] += 1
            row["pages"] += pages
            row["ok"] += ok
            row["failed"] += pages - ok
            row["faults"] += faults
            row["bytes"] += nbytes
            row["seconds"] += seconds
            self._latency[op][bisect.bisect_left(self.LATENCY_BOUNDS, seconds)] += 1
            if op == "set" and self._eviction_watch is not None:
                self._eviction_watch.wrote(ok, nbytes)

    def fault(self, op: str, error: BaseException) -> None:
        """Count a fault raised by the backend during ``op``."""
        with self._lock:
            self._ops[op]["faults"] += 1
            self.last_fault = f"{op}: {type(error).__name__}: {error}"[:500]

    def bump(self, name: str, amount: float = 1) -> None:
        """Increase a named counter (``integrity_failures``, ``retries``, ...)."""
        warning = None
        with self._lock:
            self._extra[name] += amount
            if name == "evictions" and self._eviction_watch is not None:
                pressure, warning = self._eviction_watch.evicted(amount)
                if pressure:
                    self._extra["eviction_pressure"] += 1
        if warning is not None:
            logger.warning(warning)

    def get(self, name: str) -> float:
        """Current value of a named counter (0 when never bumped)."""
        with self._lock:
            return self._extra.get(name, 0)

    def op(self, op: str) -> dict[str, float]:
        """Copy of one operation's counters."""
        with self._lock:
            return dict(self._ops[op])

    def total_faults(self) -> int:
        """Faults over every operation."""
        with self._lock:
            return int(sum(row["faults"] for row in self._ops.values()))

    def snapshot(self) -> dict[str, Any]:
        """Plain nested dict of every counter."""
        with self._lock:
            ops = {
                name: {k: (int(v) if k != "seconds" else round(v, 6)) for k, v in row.items()}
                for name, row in self._ops.items()
            }
            extra = {k: (int(v) if float(v).is_integer() else v) for k, v in self._extra.items()}
            latency = {
                name: {
                    "bounds": list(self.LATENCY_BOUNDS),
                    "counts": list(counts),
                    "sum": round(self._ops[name]["seconds"], 6),
                }
                for name, counts in self._latency.items()
            }
            return {
                "ops": ops,
                "latency": latency,
                "counters": extra,
                "faults": int(sum(r["faults"] for r in self._ops.values())),
                "last_fault": self.last_fault,
            }
