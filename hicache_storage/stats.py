"""Thread-safe operation counters behind ``get_stats()``."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict, deque
from typing import Any, Protocol

from .eviction_watch import EvictionWatch, EvictionWatchObserver

__all__ = ["StatsObserver", "StorageStats"]


class StatsObserver(Protocol):
    """Told of every change :class:`StorageStats` records (an exporter mirrors them elsewhere)."""

    def on_call(self, op: str, pool: str, *, pages: int, ok: int, nbytes: int, seconds: float) -> None:
        """One batch call of ``op`` on ``pool`` ended."""
        ...

    def on_fault(self, op: str) -> None:
        """The backend raised during ``op``."""
        ...

    def on_event(self, name: str, amount: float) -> None:
        """A named counter grew by ``amount``."""
        ...


class StorageStats:
    """Counters per operation (``exists``, ``get``, ``set``, ``delete``) plus named extras.

    Per operation: ``calls``, ``pages``, ``ok`` (hits / successful writes), ``failed`` (misses /
    failed writes), ``faults`` (exceptions from the backend), ``bytes`` and ``seconds``.
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
        self._samples: dict[str, deque[tuple[int, int, float]]] | None = None
        self._sample_limit = 0
        self._observers: list[StatsObserver] = []

    def watch_evictions(self, capacity_bytes: int, what: str) -> None:
        """Warn (log, rate-limited) and count ``eviction_pressure`` when ``evictions`` show the store,
        of ``capacity_bytes``, evicts most of what it is given; ``what`` names the backend and option."""
        self.observe(EvictionWatchObserver(EvictionWatch(capacity_bytes, what), self.bump))

    def observe(self, observer: StatsObserver) -> None:
        """Tell ``observer`` of every call, fault and event from now on (it must not raise or block)."""
        with self._lock:
            self._observers.append(observer)

    def keep_samples(self, limit: int) -> None:
        """From now on keep the last ``limit`` calls of each operation as ``(pages, bytes, seconds)``."""
        with self._lock:
            self._sample_limit = limit
            self._samples = {}

    def drain_samples(self, op: str) -> list[tuple[int, int, float]]:
        """The kept samples of ``op`` since the last drain (oldest first), forgetting them."""
        with self._lock:
            if self._samples is None or op not in self._samples:
                return []
            kept = list(self._samples[op])
            self._samples[op].clear()
            return kept

    def record(
        self, op: str, *, pages: int, ok: int, nbytes: int = 0, seconds: float = 0.0, faults: int = 0, pool: str = ""
    ) -> None:
        """Add one call's outcome (``pool``: the pool it moved pages of, for observers)."""
        for observer in self._observers:
            observer.on_call(op, pool, pages=pages, ok=ok, nbytes=nbytes, seconds=seconds)
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
            if self._samples is not None and pages:
                kept = self._samples.get(op)
                if kept is None:
                    kept = self._samples[op] = deque(maxlen=self._sample_limit)
                kept.append((pages, nbytes, seconds))

    def fault(self, op: str, error: BaseException) -> None:
        """Count a fault raised by the backend during ``op``."""
        for observer in self._observers:
            observer.on_fault(op)
        with self._lock:
            self._ops[op]["faults"] += 1
            self.last_fault = f"{op}: {type(error).__name__}: {error}"[:500]

    def note(self, message: str) -> None:
        """Record ``message`` as the latest fault description, counting nothing."""
        with self._lock:
            self.last_fault = message[:500]

    def bump(self, name: str, amount: float = 1) -> None:
        """Increase a named counter (``integrity_failures``, ``retries``, ...)."""
        for observer in self._observers:
            observer.on_event(name, amount)
        with self._lock:
            self._extra[name] += amount

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
