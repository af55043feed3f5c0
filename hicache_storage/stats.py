"""Thread-safe operation counters behind ``get_stats()``."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

__all__ = ["StorageStats"]


class StorageStats:
    """Counters per operation (``exists``, ``get``, ``set``, ``delete``) plus named extras.

    Per operation: ``calls``, ``pages``, ``ok`` (hits / successful writes), ``failed`` (misses /
    failed writes), ``faults`` (exceptions from the backend), ``bytes`` and ``seconds``.
    """

    _FIELDS = ("calls", "pages", "ok", "failed", "faults", "bytes", "seconds")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(self._FIELDS, 0))
        self._extra: dict[str, float] = defaultdict(float)
        self.last_fault: str | None = None

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

    def fault(self, op: str, error: BaseException) -> None:
        """Count a fault raised by the backend during ``op``."""
        with self._lock:
            self._ops[op]["faults"] += 1
            self.last_fault = f"{op}: {type(error).__name__}: {error}"[:500]

    def bump(self, name: str, amount: float = 1) -> None:
        """Increase a named counter (``integrity_failures``, ``retries``, ...)."""
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
            return {
                "ops": ops,
                "counters": extra,
                "faults": int(sum(r["faults"] for r in self._ops.values())),
                "last_fault": self.last_fault,
            }
