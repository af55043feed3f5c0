"""Spread the pages of one batch over a few I/O threads (``pread``/``pwrite`` and XXH3 release the GIL).

The batch is cut into contiguous runs, one per thread; the calling thread takes the first run. Every
run has finished before :meth:`IoThreads.map` returns or raises, so no transfer into or out of host
memory outlives the call that asked for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["IoThreads"]

A = TypeVar("A")
B = TypeVar("B")
R = TypeVar("R")


class IoThreads:
    """Up to ``threads`` threads (the caller included) per batch; the pool starts on first use."""

    def __init__(self, threads: int) -> None:
        self.threads = max(1, threads)
        self._executor: ThreadPoolExecutor | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():  # a forked child starts its own
                self._executor = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="hicache-io")
                self._pid = os.getpid()
            return self._executor

    def map(self, function: Callable[[A, B], R], first: Sequence[A], second: Sequence[B]) -> list[R]:
        """``[function(a, b) for a, b in zip(first, second)]`` in order; re-raises the first exception."""
        if min(self.threads, len(first)) <= 1:
            return [function(a, b) for a, b in zip(first, second, strict=True)]

        def run(begin: int, end: int) -> list[R]:
            return [function(first[index], second[index]) for index in range(begin, end)]

        return [result for results in self.runs(len(first), run) for result in results]

    def runs(self, count: int, function: Callable[[int, int], R]) -> list[R]:
        """``function(begin, end)`` of each contiguous run of ``range(count)``, one run per thread, in order
        (no run for ``count == 0``); re-raises the first exception once every run has ended."""
        workers = min(self.threads, count)
        if workers <= 1:
            return [function(0, count)] if count else []
        bounds = [count * index // workers for index in range(workers + 1)]
        pool = self._pool()
        futures: list[Future[R]] = [pool.submit(function, bounds[i], bounds[i + 1]) for i in range(1, workers)]
        try:
            results = [function(bounds[0], bounds[1])]
        finally:
            wait(futures)
        results.extend(future.result() for future in futures)
        return results

    def close(self) -> None:
        """Stop the threads (idempotent); a later :meth:`map` starts new ones."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None and self._pid == os.getpid():
            executor.shutdown(wait=True)
