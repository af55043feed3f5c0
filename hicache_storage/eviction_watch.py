"""A warning when a capacity-bound store evicts most of what it is given.

A full cache evicts one page per page written; that alone is normal. It is too small for its
workload when what it is given in a minute exceeds all it can hold and most of those writes have
already pushed pages out: a page then lives less than a minute and is mostly gone before the
engine asks for it again. :class:`EvictionWatch` sees the writes and evictions of one instance
over a sliding 60 s window; when both hold it counts ``eviction_pressure`` (once per 10 s step
of the window) and logs a warning at most once per 5 minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["EvictionWatch", "EvictionWatchObserver"]

logger = logging.getLogger("hicache_storage.evictions")

WINDOW_S = 60.0
STEP_S = 10.0
LOG_EVERY_S = 300.0
#: Fewest pages written in a window before it can count as pressure (a trickle proves nothing).
MIN_PAGES = 64


class EvictionWatch:
    """Writes and evictions of one instance over the last :data:`WINDOW_S` seconds (not thread-safe:
    the caller holds its own lock)."""

    def __init__(self, capacity_bytes: int, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity_bytes = capacity_bytes
        self.what = what
        self._clock = clock
        self._steps: deque[list[float]] = deque()  # [step start, pages written, bytes written, pages evicted]
        self._last_judged = -1.0
        self._last_logged: float | None = None

    def _step(self) -> list[float]:
        now = self._clock()
        start = now - now % STEP_S
        if not self._steps or self._steps[-1][0] != start:
            self._steps.append([start, 0.0, 0.0, 0.0])
        while self._steps and self._steps[0][0] <= now - WINDOW_S:
            self._steps.popleft()
        return self._steps[-1]

    def wrote(self, pages: int, nbytes: int) -> None:
        """Pages (and their bytes) stored."""
        step = self._step()
        step[1] += pages
        step[2] += nbytes

    def evicted(self, pages: float) -> tuple[bool, str | None]:
        """Pages evicted. Returns (whether this step of the window counts as pressure, the warning to
        log now or ``None``); each step of the window is judged once."""
        step = self._step()
        step[3] += pages
        if step[0] == self._last_judged:
            return False, None
        written = sum(s[1] for s in self._steps)
        nbytes = sum(s[2] for s in self._steps)
        evicted = sum(s[3] for s in self._steps)
        if written < MIN_PAGES or nbytes <= self.capacity_bytes or evicted < written / 2:
            return False, None
        self._last_judged = step[0]
        now = self._clock()
        if self._last_logged is not None and now - self._last_logged < LOG_EVERY_S:
            return True, None
        self._last_logged = now
        return True, (
            f"{self.what}: evicted {int(evicted):,} of the {int(written):,} pages written in the last "
            f"{WINDOW_S:g} s; those writes ({int(nbytes):,} bytes) exceed its capacity of {self.capacity_bytes:,} "
            "bytes, so a page lives less than a minute: raise the capacity or give this workload its own store "
            "(counter eviction_pressure; logged at most every 5 minutes)"
        )


class EvictionWatchObserver:
    """Feeds an :class:`EvictionWatch` from a storage's statistics (``set`` calls and ``evictions``);
    counts ``eviction_pressure`` through ``bump`` and logs the watch's warnings."""

    def __init__(self, watch: EvictionWatch, bump: Callable[[str], None]) -> None:
        self._watch = watch
        self._bump = bump
        self._lock = threading.Lock()

    def on_call(self, op: str, pool: str, *, pages: int, ok: int, nbytes: int, seconds: float) -> None:
        if op == "set":
            with self._lock:
                self._watch.wrote(ok, nbytes)

    def on_fault(self, op: str) -> None:
        """Faults do not change the pressure."""

    def on_event(self, name: str, amount: float) -> None:
        if name != "evictions":
            return
        with self._lock:
            pressure, warning = self._watch.evicted(amount)
        if pressure:
            self._bump("eviction_pressure")
        if warning is not None:
            logger.warning(warning)
