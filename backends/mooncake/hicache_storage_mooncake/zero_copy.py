"""Zero-copy page transfers of the mooncake backend: pool pages move by pointer, with a header slot each.

Writes (one header slab of pages per call), with the client's put sessions
(``batch_put_session_start``, ``batch_put_from_multi_buffer_ranges``, ``batch_put_session_end``,
``batch_put_session_revoke``): a worker thread reserves the batch's objects while the caller hashes
the pages and packs their headers, in chunks of :data:`PIPELINE_PAGES`; the worker moves each chunk
([header, segment, ...] ranged into its object) as soon as its headers are packed, so later pages
are hashed while earlier ones travel, then publishes the batch (readers see nothing before). A key
with an object already (``OBJECT_ALREADY_EXISTS``) is removed and reserved again, so a batch of new
keys costs no remove; keys whose transfer failed are revoked. A key reserved by a write still in
flight in another client can neither be reserved nor removed (``False``, counted as
``mooncake_replica_not_ready``; one in flight in this client: ``mooncake_invalid_params``).
Clients without put sessions: ``batch_remove(force)`` on a helper thread while the headers are
packed, then ``batch_put_from_multi_buffers`` (Mooncake's put keeps an existing value).

Reads, with get sessions (``batch_get_session_start``, ``batch_get_into_multi_buffer_ranges``,
``batch_get_session_end``): the replicas are looked up once and [header slot, segment, ...] are
read as ranges of each object; without them, ``batch_get_into_multi_buffers``. Then the header (and
checksum) check of :meth:`MooncakeBackend.accept`. The client's plain multi-buffer calls are much
slower than its sessions here (``benchmarks/bench_mooncake.py`` measures both).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hicache_storage.plugin import BackendFault, PageBuffers, current_deadline

from .client import INVALID_PARAMS, OBJECT_ALREADY_EXISTS, OBJECT_NOT_FOUND, TRANSFER_FAIL
from .memory import SLAB_WAIT_S, SlabArena
from .record import HEADER_SIZE, key_digest, pack_header

if TYPE_CHECKING:
    from .backend import MooncakeBackend

__all__ = [
    "GET_SESSION_CALLS",
    "PIPELINE_PAGES",
    "SESSION_CALLS",
    "has_get_sessions",
    "has_put_sessions",
    "read_direct",
    "write_direct",
]

#: Pages per chunk of a session write: a chunk moves once its headers are packed, while the caller
#: hashes the next one.
PIPELINE_PAGES = 16

#: The client methods of a put session; clients without them write with remove + put.
SESSION_CALLS = (
    "batch_put_session_start",
    "batch_put_from_multi_buffer_ranges",
    "batch_put_session_end",
    "batch_put_session_revoke",
)
#: The client methods of a get session; clients without them read with ``batch_get_into_multi_buffers``.
GET_SESSION_CALLS = ("batch_get_session_start", "batch_get_into_multi_buffer_ranges", "batch_get_session_end")


def has_put_sessions(client: Any) -> bool:
    """Whether ``client`` offers Mooncake's put sessions (reserve, ranged put, publish)."""
    return all(callable(getattr(client, name, None)) for name in SESSION_CALLS)


def has_get_sessions(client: Any) -> bool:
    """Whether ``client`` offers Mooncake's get sessions (look replicas up once, ranged gets)."""
    return all(callable(getattr(client, name, None)) for name in GET_SESSION_CALLS)


@dataclass(frozen=True)
class _Batch:
    """Pages of one write in a header slab: object names, and per page the buffers [header slot,
    segments...] (pointers, sizes)."""

    arena: SlabArena
    slab: int
    names: list[str]
    pages: list[PageBuffers]
    ptrs: list[list[int]]
    sizes: list[list[int]]

    @property
    def hold(self) -> tuple[SlabArena, int]:
        """The slab a call given up on keeps until it ends."""
        return self.arena, self.slab

    def pack_headers(self, backend: MooncakeBackend, which: range | None = None) -> None:
        """Hash each page of ``which`` (default: all; with ``verify_checksum``) and write its header."""
        for n in range(len(self.pages)) if which is None else which:
            offset = self.slab + n * HEADER_SIZE
            length = sum(self.sizes[n]) - HEADER_SIZE
            pack_header(self.arena.view, offset, length, backend.digest(self.pages[n]), key_digest(self.names[n]))


def write_direct(
    backend: MooncakeBackend, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
) -> list[bool]:
    """Store pages of registered memory as [header, segments...] (at most one header slab of them)."""
    arena = backend.header_arena()
    with arena.slab() as slab:
        batch = _Batch(
            arena,
            slab,
            names,
            pages,
            [[arena.base + slab + n * HEADER_SIZE, *ptrs[n]] for n in range(len(names))],
            [[HEADER_SIZE, *sizes[n]] for n in range(len(names))],
        )
        codes = _write_in_session(backend, batch) if backend.put_sessions else _write_remove_put(backend, batch)
    return [code == 0 for code in codes]


def _write_in_session(backend: MooncakeBackend, batch: _Batch) -> list[int]:
    """Reserve on a worker while the headers are packed here, chunk by chunk; the worker moves each
    chunk once its headers are packed, then publishes. Final codes."""
    headers = _Headers(len(batch.names), backend.pipeline_pages)
    running = backend.calls.submit(_Session(backend, batch, headers).run)
    headers.pack(backend, batch)
    # Without checksums a late transfer of reused pool memory would store unverifiable bytes: such
    # writes are waited for to the end, never given up on.
    codes = backend.calls.wait_for(running, "put session", batch.hold, bounded=backend.verify_checksum)
    return backend.check_codes(codes, len(batch.names), "put session")


class _Headers:
    """The headers of a batch, packed by the caller in chunks of ``step`` pages; a worker waits for each chunk."""

    def __init__(self, count: int, step: int) -> None:
        self.chunks = [range(begin, min(count, begin + step)) for begin in range(0, count, step)]
        self._ready = [threading.Event() for _ in self.chunks]
        self._failed = False

    def pack(self, backend: MooncakeBackend, batch: _Batch) -> None:
        """Pack every chunk in order, announcing each (all of them, as failed, if packing raises)."""
        try:
            for chunk, ready in zip(self.chunks, self._ready, strict=True):
                batch.pack_headers(backend, chunk)
                ready.set()
        except BaseException:
            self._failed = True
            raise
        finally:
            for ready in self._ready:
                ready.set()

    def wait(self, index: int, timeout_s: float) -> bool:
        """Whether chunk ``index`` was packed within ``timeout_s``."""
        return self._ready[index].wait(timeout_s) and not self._failed


class _Session:
    """One put session run on a worker thread: reserve, move each chunk once its headers are packed, publish."""

    def __init__(self, backend: MooncakeBackend, batch: _Batch, headers: _Headers) -> None:
        self.client = backend.client
        self.replicate = backend.replicate
        self.names = batch.names
        self.ptrs = batch.ptrs
        self.sizes = batch.sizes
        self.totals = [sum(row) for row in batch.sizes]
        self.headers = headers
        deadline = current_deadline()
        self.wait_s = SLAB_WAIT_S if deadline is None else max(0.0, deadline - time.monotonic()) + SLAB_WAIT_S

    def run(self) -> list[int]:
        """Final code per key: 0 when its object was published."""
        codes = self._reserve(list(range(len(self.names))))
        started = [n for n, code in enumerate(codes) if code == 0]
        if not started:
            return codes
        try:
            done = self._transfer(set(started), codes)
        except BaseException:  # never leave a reservation behind: it would block the key until the master drops it
            self._revoke(started)
            raise
        if done:
            ended = self.client.batch_put_session_end([self.names[n] for n in done])
            for n, code in zip(done, _ints(ended, len(done)), strict=True):
                codes[n] = code
        return codes

    def _transfer(self, started: set[int], codes: list[int]) -> list[int]:
        """Move [header, segments...] of the ``started`` keys, chunk by chunk as their headers are packed;
        the keys fully moved (the others are revoked, their codes set)."""
        done: list[int] = []
        failed: list[int] = []
        for index, chunk in enumerate(self.headers.chunks):
            todo = [n for n in chunk if n in started]
            if not todo:
                continue
            if not self.headers.wait(index, self.wait_s):
                failed.extend(n for n in started if n >= chunk.start)
                break
            moved = self.client.batch_put_from_multi_buffer_ranges(
                [self.names[n] for n in todo],
                [self.ptrs[n] for n in todo],
                [self.sizes[n] for n in todo],
                [_offsets(self.sizes[n]) for n in todo],
            )
            for n, code in zip(todo, _ints(moved, len(todo)), strict=True):
                if code == self.totals[n]:
                    done.append(n)
                else:
                    failed.append(n)
                    codes[n] = code if code < 0 else TRANSFER_FAIL
        if failed:
            self._revoke(failed)
            for n in failed:
                codes[n] = codes[n] or TRANSFER_FAIL
        return done

    def _reserve(self, which: list[int]) -> list[int]:
        """Start the sessions of ``which``; an existing object is removed and its session started again."""
        codes = [0] * len(self.names)
        started = self.client.batch_put_session_start(
            [self.names[n] for n in which], [self.totals[n] for n in which], self.replicate
        )
        existing: list[int] = []
        for n, code in zip(which, _ints(started, len(which)), strict=True):
            codes[n] = code
            if code == OBJECT_ALREADY_EXISTS:
                existing.append(n)
        if not existing:
            return codes
        removed = self.client.batch_remove([self.names[n] for n in existing], True)
        again: list[int] = []
        for n, code in zip(existing, _ints(removed, len(existing)), strict=True):
            if code in (0, OBJECT_NOT_FOUND):
                again.append(n)
            else:  # e.g. REPLICA_IS_NOT_READY: another write of this key is in flight
                codes[n] = code
        if again:
            restarted = self.client.batch_put_session_start(
                [self.names[n] for n in again], [self.totals[n] for n in again], self.replicate
            )
            for n, code in zip(again, _ints(restarted, len(again)), strict=True):
                codes[n] = code
        return codes

    def _revoke(self, which: list[int]) -> None:
        self.client.batch_put_session_revoke([self.names[n] for n in which])


def _write_remove_put(backend: MooncakeBackend, batch: _Batch) -> list[int]:
    """Remove (on a helper thread while the headers are packed), then multi-buffer put; final codes."""
    names = batch.names
    removing = backend.calls.in_background(backend.client.batch_remove, names, True)
    try:
        batch.pack_headers(backend)
    finally:
        removed_codes = backend.calls.wait_for(removing, "batch_remove", batch.hold)
    codes = backend.check_codes(removed_codes, len(names), "batch_remove")
    # A key whose old object could not be removed is not put: put would keep the old value.
    todo = [n for n, code in enumerate(codes) if code in (0, OBJECT_NOT_FOUND)]
    if not todo:
        return codes
    put_args = ([names[n] for n in todo], [batch.ptrs[n] for n in todo], [batch.sizes[n] for n in todo])
    put = backend.calls.submit(backend.client.batch_put_from_multi_buffers, *put_args, backend.replicate)
    result = backend.calls.wait_for(put, "batch_put_from_multi_buffers", batch.hold, bounded=backend.verify_checksum)
    for n, code in zip(todo, backend.check_codes(result, len(todo), "batch_put_from_multi_buffers"), strict=True):
        codes[n] = code
    return codes


def read_direct(
    backend: MooncakeBackend, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
) -> list[bool]:
    """Get into [header slot, segments...] for pages in registered memory (at most one slab); then check."""
    arena = backend.header_arena()
    out = [False] * len(names)
    with arena.slab() as slab:
        arena.view[slab : slab + len(names) * HEADER_SIZE] = bytes(len(names) * HEADER_SIZE)
        all_ptrs = [[arena.base + slab + n * HEADER_SIZE, *ptrs[n]] for n in range(len(names))]
        all_sizes = [[HEADER_SIZE, *sizes[n]] for n in range(len(names))]
        client = backend.client
        if backend.get_sessions:
            call, what = _get_in_session, "get session"
            args: tuple[Any, ...] = (client, names, all_ptrs, all_sizes)
        else:
            call, what = client.batch_get_into_multi_buffers, "batch_get_into_multi_buffers"
            args = (names, all_ptrs, all_sizes)
        codes = backend.check_codes(backend.calls.call(what, call, *args, hold=(arena, slab)), len(names), what)
        for n, code in enumerate(codes):
            length = sum(sizes[n])
            if backend.complete(code, HEADER_SIZE + length):
                out[n] = backend.accept(arena.view, slab + n * HEADER_SIZE, names[n], pages[n], length)
    return out


def _get_in_session(client: Any, names: list[str], ptrs: list[list[int]], sizes: list[list[int]]) -> list[int]:
    """Bytes read per key (or a negative code): a get session (replicas looked up once), one ranged get.

    A ranged get of more bytes than the object holds is refused (``INVALID_PARAMS``): reported as 0
    bytes, a size mismatch.
    """
    codes = _ints(client.batch_get_session_start(names), len(names))
    started = [n for n, code in enumerate(codes) if code == 0]
    try:
        if started:
            moved = client.batch_get_into_multi_buffer_ranges(
                [names[n] for n in started],
                [ptrs[n] for n in started],
                [sizes[n] for n in started],
                [_offsets(sizes[n]) for n in started],
            )
            for n, code in zip(started, _ints(moved, len(started)), strict=True):
                codes[n] = 0 if code == INVALID_PARAMS else code
    finally:
        client.batch_get_session_end(names)
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
