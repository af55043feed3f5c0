"""Mooncake client calls under the SDK's deadline: inside the call gate, on worker threads, given up on in time.

A client whose master was killed retries its connection for seconds whatever its RPC timeout
says, so under a deadline each call runs on a worker thread and the caller waits at most what is
left of the deadline. A call given up on keeps the slab it may still write (``hold``) until it
ends, and is reported through ``on_abandoned``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from hicache_storage.plugin import BackendFault, current_deadline

from .client import CallGate
from .memory import SlabArena

__all__ = ["CALL_WORKERS", "TRANSFER_LANES", "DeadlineCalls"]

#: Worker threads running Mooncake calls under a deadline (calls given up on keep theirs until they end).
CALL_WORKERS = 8
#: Threads moving the chunks of a session write at once: the client's TCP transport waits for the
#: peer's acknowledgement of each buffer before it sends the next one of a call, so concurrent
#: calls overlap those round trips.
TRANSFER_LANES = 4
#: Threads of each pool: ``workers`` run calls, ``background`` a write's remove, ``lanes`` chunk transfers.
_POOL_SIZES = {"workers": CALL_WORKERS, "background": 1, "lanes": TRANSFER_LANES}


class DeadlineCalls:
    """Runs client calls inside ``gate``; under a deadline on worker threads (built on first use)."""

    def __init__(self, gate: CallGate, on_abandoned: Callable[[], None]) -> None:
        self.gate = gate
        self._on_abandoned = on_abandoned
        self._lock = threading.Lock()
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def call(
        self, what: str, function: Callable[..., Any], *args: Any, hold: tuple[SlabArena, int] | None = None
    ) -> Any:
        """``function(*args)`` on the client, inside the call gate; under a deadline on a worker thread,
        waited for at most what is left of it (then :class:`BackendFault`; ``hold``'s slab stays
        reserved until the call ends)."""
        deadline = current_deadline()
        if deadline is None:
            with self.gate:
                return function(*args)
        left = deadline - time.monotonic()
        if left <= 0:
            raise BackendFault(f"Mooncake {what} not started: the call's deadline has passed")
        future = self._pool("workers").submit(self.gated, function, *args)
        try:
            return future.result(timeout=left)
        except FutureTimeout:
            self._abandon(future, hold)
            raise BackendFault(f"Mooncake {what} did not answer within the call's deadline") from None

    def gated(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` inside the call gate, on this thread."""
        with self.gate:
            return function(*args)

    def in_background(self, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """Start ``function(*args)`` (gated) on the one background thread, e.g. a write's ``batch_remove``
        while the caller prepares headers; collect it with :meth:`wait_for`."""
        return self._pool("background").submit(self.gated, function, *args)

    def submit(self, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """Start ``function(*args)`` (gated) on a worker thread, deadline or not, e.g. a write the caller
        prepares headers for meanwhile; collect it with :meth:`wait_for`."""
        return self._pool("workers").submit(self.gated, function, *args)

    def lane(self, function: Callable[..., Any], *args: Any) -> Future[Any]:
        """Start ``function(*args)`` on a transfer lane, ungated: only for a call that holds the gate
        (a session on a worker) and waits for the lane before it ends."""
        return self._pool("lanes").submit(function, *args)

    def wait_for(self, future: Future[Any], what: str, hold: tuple[SlabArena, int], *, bounded: bool = True) -> Any:
        """The result of ``future`` (a client call on a helper thread), waited for within the call's
        deadline (``bounded``), else for as long as it takes."""
        deadline = current_deadline() if bounded else None
        try:
            return future.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            self._abandon(future, hold)
            raise BackendFault(f"Mooncake {what} did not answer within the call's deadline") from None

    def shutdown(self) -> None:
        """Wait for the background and worker threads to finish (after the gate is shut)."""
        for pool in list(self._pools.values()):
            pool.shutdown(wait=True)

    def _abandon(self, future: Future[Any], hold: tuple[SlabArena, int] | None) -> None:
        self._on_abandoned()
        if hold is not None:
            arena, offset = hold
            arena.keep(offset)
            future.add_done_callback(lambda _done: arena.give_back(offset))

    def _pool(self, which: str) -> ThreadPoolExecutor:
        pool = self._pools.get(which)
        if pool is not None:
            return pool
        with self._lock:
            if which not in self._pools:
                self._pools[which] = ThreadPoolExecutor(
                    max_workers=_POOL_SIZES[which], thread_name_prefix=f"hicache-mooncake-{which}"
                )
            return self._pools[which]
