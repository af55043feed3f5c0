"""Mooncake put and get sessions: how the backend's zero-copy and staged transfers move objects.

A put session (``batch_put_session_start``, ``batch_put_from_multi_buffer_ranges``,
``batch_put_session_end``, ``batch_put_session_revoke``) reserves objects, fills them with ranged
puts from registered buffers and publishes them; readers see nothing before the end. A get
session (``batch_get_session_start``, ``batch_get_into_multi_buffer_ranges``,
``batch_get_session_end``) looks the replicas up once and reads ranges of the objects. At load 2-7
the client answered a batch through its sessions faster than through its plain batch calls
(``batch_put_from_multi_buffers``, ``batch_upsert_from``, ``batch_get_into_multi_buffers``,
``batch_get_into``): 10-15 % at load 2, about twice as fast at load 7; on an idle host its plain
get was ahead, so zero-copy reads choose by measurement (``get_calls``);
``benchmarks/bench_mooncake.py`` measures both. The ranged calls of one batch run on up to
``TRANSFER_LANES`` threads at once: the client's TCP transport waits for the peer's acknowledgement
of each buffer before it sends the next one of a call, and concurrent calls overlap those round
trips.

:func:`put_in_session` overlaps the caller's preparation of the buffers (hashing pages, packing
headers, copying staged pages) with the transfer: a worker thread reserves the objects while the
caller prepares the first chunk of :data:`PIPELINE_PAGES` pages, and moves each chunk as soon as it
is prepared, while the caller prepares the next. A key with an object already
(``OBJECT_ALREADY_EXISTS``) is removed and reserved again, so a batch of new keys costs no remove;
keys whose transfer failed are revoked. A key reserved by a write in flight in another client can
neither be reserved nor removed (``REPLICA_IS_NOT_READY``); one in flight in this client is
refused (``INVALID_PARAMS``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed, wait
from typing import TYPE_CHECKING, Any

from hicache_storage.plugin import BackendFault, current_deadline

from .client import INVALID_PARAMS, OBJECT_ALREADY_EXISTS, OBJECT_NOT_FOUND, OUTAGE_CODES, TRANSFER_FAIL
from .memory import SLAB_WAIT_S, SlabArena

if TYPE_CHECKING:
    from .backend import MooncakeBackend

__all__ = [
    "GET_SESSION_CALLS",
    "PIPELINE_PAGES",
    "PUT_SESSION_CALLS",
    "get_in_session",
    "has_sessions",
    "put_in_session",
]

#: Objects per ranged put or get: a write's chunk moves once prepared, while the caller prepares the next.
PIPELINE_PAGES = 8
#: The client methods of a put session.
PUT_SESSION_CALLS = (
    "batch_put_session_start",
    "batch_put_from_multi_buffer_ranges",
    "batch_put_session_end",
    "batch_put_session_revoke",
)
#: The client methods of a get session.
GET_SESSION_CALLS = ("batch_get_session_start", "batch_get_into_multi_buffer_ranges", "batch_get_session_end")


def has_sessions(client: Any, calls: Sequence[str]) -> bool:
    """Whether ``client`` offers every method of ``calls`` (:data:`PUT_SESSION_CALLS`, :data:`GET_SESSION_CALLS`)."""
    return all(callable(getattr(client, name, None)) for name in calls)


class Transfers:
    """Objects of one call: names, and per object its buffers (pointers, sizes) in object order."""

    def __init__(self, names: list[str], ptrs: list[list[int]], sizes: list[list[int]]) -> None:
        self.names = names
        self.ptrs = ptrs
        self.sizes = sizes
        self.totals = [sum(row) for row in sizes]

    def ranged(self, which: Sequence[int]) -> tuple[list[str], list[list[int]], list[list[int]], list[list[int]]]:
        """Arguments of a ranged put or get of the objects ``which``: names, pointers, sizes, offsets."""
        return (
            [self.names[n] for n in which],
            [self.ptrs[n] for n in which],
            [self.sizes[n] for n in which],
            [_offsets(self.sizes[n]) for n in which],
        )


def put_in_session(
    backend: MooncakeBackend,
    objects: Transfers,
    prepare: Callable[[range], None],
    hold: tuple[SlabArena, int],
    *,
    bounded: bool = True,
) -> list[int]:
    """Store ``objects``, calling ``prepare(chunk)`` here for each chunk of positions before it moves.

    Final code per object (0: published), checked by :meth:`MooncakeBackend.check_codes`. Waited
    for within the call's deadline (``bounded``), else to the end: a late transfer of pool memory the
    caller has reused since would store other bytes, which only the checksum catches.
    """
    chunks = _Chunks(len(objects.names), backend.pipeline_pages)
    running = backend.calls.submit(_PutSession(backend, objects, chunks).run)
    chunks.prepare(prepare)
    codes = backend.calls.wait_for(running, "put session", hold, bounded=bounded)
    return backend.check_codes(codes, len(objects.names), "put session")


def get_in_session(
    backend: MooncakeBackend, objects: Transfers, on_chunk: Callable[[list[int], list[int]], None] | None = None
) -> list[int]:
    """Bytes read per object (or a negative code): one get session, ranged gets of
    :data:`PIPELINE_PAGES` objects each, up to ``TRANSFER_LANES`` at once. Run it in the call gate.

    ``on_chunk(positions, codes)`` runs on this thread as each ranged get ends, while the others move,
    with the final codes of ``positions``: a check of those pages then finds their bytes still in
    the CPU cache. The client refuses a ranged get (``INVALID_PARAMS``) of more bytes than the object
    holds and when the transfer fails; the object's size (one more request, for refused objects only)
    tells which: a shorter object is reported as 0 bytes (a size mismatch), a failed transfer as
    ``TRANSFER_FAIL``.
    """
    client, names = backend.client, objects.names
    codes = _ints(client.batch_get_session_start(names), len(names))
    started = [n for n, code in enumerate(codes) if code == 0]
    step = backend.pipeline_pages
    moving: dict[Future[Any], list[int]] = {}
    try:
        call = client.batch_get_into_multi_buffer_ranges
        for begin in range(0, len(started), step):
            chunk = started[begin : begin + step]
            moving[backend.calls.lane(call, *objects.ranged(chunk))] = chunk
        for future in as_completed(moving):
            chunk = moving[future]
            for n, code in zip(chunk, _ints(future.result(), len(chunk)), strict=True):
                codes[n] = code
                if code == INVALID_PARAMS:
                    codes[n] = 0 if 0 <= int(client.get_size(names[n])) < objects.totals[n] else TRANSFER_FAIL
            if on_chunk is not None:
                on_chunk(chunk, codes)
    finally:  # every lane has ended before the session does, whatever happened
        wait(moving)
        client.batch_get_session_end(names)
    return codes


class _Chunks:
    """Positions of a batch in chunks of ``step``, prepared by the caller in order; a worker waits for each."""

    def __init__(self, count: int, step: int) -> None:
        self.ranges = [range(begin, min(count, begin + step)) for begin in range(0, count, step)]
        self._ready = [threading.Event() for _ in self.ranges]
        self._failed = False

    def prepare(self, prepare: Callable[[range], None]) -> None:
        """Prepare every chunk in order, announcing each (all of them, as failed, if preparing raises)."""
        try:
            for chunk, ready in zip(self.ranges, self._ready, strict=True):
                prepare(chunk)
                ready.set()
                # Hand the GIL over: a worker or lane thread back from the client waits for it, and a
                # thread hashing on would keep it for up to the switch interval (5 ms).
                time.sleep(0)
        except BaseException:
            self._failed = True
            raise
        finally:
            for ready in self._ready:
                ready.set()

    def wait(self, index: int, timeout_s: float) -> bool:
        """Whether chunk ``index`` was prepared within ``timeout_s``."""
        return self._ready[index].wait(timeout_s) and not self._failed


class _PutSession:
    """One put session run on a worker thread: reserve, move each chunk once prepared, publish."""

    def __init__(self, backend: MooncakeBackend, objects: Transfers, chunks: _Chunks) -> None:
        self.client = backend.client
        self.calls = backend.calls
        self.replicate = backend.replicate
        self.objects = objects
        self.chunks = chunks
        deadline = current_deadline()
        self.wait_s = SLAB_WAIT_S if deadline is None else max(0.0, deadline - time.monotonic()) + SLAB_WAIT_S

    def run(self) -> list[int]:
        """Final code per object: 0 when it was published."""
        codes = self._reserve()
        started = [n for n, code in enumerate(codes) if code == 0]
        if not started:
            return codes
        try:
            done = self._transfer(set(started), codes)
        except BaseException:  # never leave a reservation behind: it blocks the key until the master drops it
            self.client.batch_put_session_revoke([self.objects.names[n] for n in started])
            raise
        if done:
            ended = self.client.batch_put_session_end([self.objects.names[n] for n in done])
            for n, code in zip(done, _ints(ended, len(done)), strict=True):
                codes[n] = code
        return codes

    def _transfer(self, started: set[int], codes: list[int]) -> list[int]:
        """Move the ``started`` objects chunk by chunk as they are prepared, up to ``TRANSFER_LANES``
        chunks at once; those fully moved (the others are revoked, their codes set)."""
        moving: list[tuple[list[int], Future[Any]]] = []
        failed: list[int] = []
        try:
            for index, chunk in enumerate(self.chunks.ranges):
                todo = [n for n in chunk if n in started]
                if not todo:
                    continue
                if not self.chunks.wait(index, self.wait_s):
                    failed.extend(n for n in started if n >= chunk.start)
                    break
                call = self.client.batch_put_from_multi_buffer_ranges
                moving.append((todo, self.calls.lane(call, *self.objects.ranged(todo))))
        finally:  # the lanes end before the session does, whatever happens
            wait([future for _, future in moving])
        results = [(todo, future.result()) for todo, future in moving]
        totals = self.objects.totals
        done: list[int] = []
        for todo, moved in results:
            for n, code in zip(todo, _ints(moved, len(todo)), strict=True):
                if code == totals[n]:
                    done.append(n)
                else:  # the client reports a failed transfer as INVALID_PARAMS: counted as what it is
                    failed.append(n)
                    codes[n] = code if code in OUTAGE_CODES else TRANSFER_FAIL
        if failed:
            self.client.batch_put_session_revoke([self.objects.names[n] for n in failed])
            for n in failed:
                codes[n] = codes[n] or TRANSFER_FAIL
        return done

    def _reserve(self) -> list[int]:
        """Start every object's session; an existing object is removed and its session started again."""
        names, totals = self.objects.names, self.objects.totals
        codes = _ints(self.client.batch_put_session_start(names, totals, self.replicate), len(names))
        existing = [n for n, code in enumerate(codes) if code == OBJECT_ALREADY_EXISTS]
        if not existing:
            return codes
        removed = _ints(self.client.batch_remove([names[n] for n in existing], True), len(existing))
        again = [n for n, code in zip(existing, removed, strict=True) if code in (0, OBJECT_NOT_FOUND)]
        for n, code in zip(existing, removed, strict=True):
            if code not in (0, OBJECT_NOT_FOUND):  # e.g. REPLICA_IS_NOT_READY: another write is in flight
                codes[n] = code
        if again:
            restarted = self.client.batch_put_session_start(
                [names[n] for n in again], [totals[n] for n in again], self.replicate
            )
            for n, code in zip(again, _ints(restarted, len(again)), strict=True):
                codes[n] = code
        return codes


def _offsets(sizes: Sequence[int]) -> list[int]:
    """Offsets in the object of buffers of ``sizes`` laid back to back."""
    offsets, at = [], 0
    for size in sizes:
        offsets.append(at)
        at += size
    return offsets


def _ints(codes: Any, count: int) -> list[int]:
    """A client call's per-key results as ints; :class:`BackendFault` when there are not ``count`` of them."""
    if not isinstance(codes, list) or len(codes) != count:
        raise BackendFault(f"Mooncake returned {codes!r} for {count} keys")
    return [int(code) for code in codes]
