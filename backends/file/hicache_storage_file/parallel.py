"""Run a per-page function over a batch on a few threads (file I/O and XXH3 release the GIL).

The batch is split into contiguous runs; the calling thread takes the first run itself. Every run
has finished before :func:`map_pages` returns or raises, so no transfer into host memory outlives
the call that asked for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["map_pages"]

K = TypeVar("K")
P = TypeVar("P")

_MAX_WORKERS = 32
_executor: ThreadPoolExecutor | None = None
_executor_pid = -1
_executor_lock = threading.Lock()


def _shared_executor() -> ThreadPoolExecutor:
    """One executor per process (recreated after ``fork``); threads start only when needed."""
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(max_workers=_MAX_WORKERS, thread_name_prefix="hicache-file-io")
            _executor_pid = os.getpid()
        return _executor


def map_pages(function: Callable[[K, P], bool], keys: Sequence[K], pages: Sequence[P], threads: int) -> list[bool]:
    """``[function(k, p) for k, p in zip(keys, pages)]`` on up to ``threads`` threads, in order.

    If any call raises, the first exception is re-raised after every run has finished.
    """
    count = len(keys)
    workers = max(1, min(threads, count, _MAX_WORKERS + 1))
    if workers == 1:
        return [function(key, page) for key, page in zip(keys, pages, strict=True)]
    bounds = [count * index // workers for index in range(workers + 1)]

    def run(begin: int, end: int) -> list[bool]:
        return [function(keys[index], pages[index]) for index in range(begin, end)]

    executor = _shared_executor()
    futures: list[Future[list[bool]]] = [
        executor.submit(run, bounds[index], bounds[index + 1]) for index in range(1, workers)
    ]
    try:
        results = run(bounds[0], bounds[1])
    finally:
        wait(futures)
    for future in futures:
        results.extend(future.result())
    return results
