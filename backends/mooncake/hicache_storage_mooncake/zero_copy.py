"""Zero-copy page transfers of the mooncake backend: pool pages move by pointer, with a header slot each.

Each object is [header, segment, ...]: the header from a slab of the registered header arena, the
segments straight from (writes) or into (reads) the registered host pool. Writes go through a put
session (:func:`~hicache_storage_mooncake.sessions.put_in_session`: the headers are packed, pages
hashed, chunk by chunk while earlier chunks travel); clients without put sessions remove the
batch's keys (on a helper thread while the headers are packed), then ``batch_put_from_multi_buffers``
(Mooncake's put keeps an existing value). Reads (``get_calls``) go through a get
session (:func:`~hicache_storage_mooncake.sessions.get_in_session`), each chunk's pages checked as
the chunk lands (the header, and checksum, of :meth:`MooncakeBackend.accept`) while later chunks
still move, or through one ``batch_get_into_multi_buffers``, then the same checks; with ``"auto"``
through whichever has cost less per byte read so far (:class:`FasterOf`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hicache_storage.plugin import PageBuffers

from .client import OBJECT_NOT_FOUND
from .faster_of import FasterOf
from .memory import SlabArena
from .record import HEADER_SIZE, key_digest, pack_header
from .sessions import Transfers, get_in_session, put_in_session

if TYPE_CHECKING:
    from .backend import MooncakeBackend

__all__ = ["read_direct", "write_direct"]


def _objects(arena: SlabArena, slab: int, names: list[str], ptrs: list[list[int]], sizes: list[list[int]]) -> Transfers:
    """The objects [header slot, segments...] of pages at ``ptrs``/``sizes``, headers in ``slab``."""
    return Transfers(
        names,
        [[arena.base + slab + n * HEADER_SIZE, *ptrs[n]] for n in range(len(names))],
        [[HEADER_SIZE, *sizes[n]] for n in range(len(names))],
    )


def write_direct(
    backend: MooncakeBackend, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
) -> list[bool]:
    """Store pages of registered memory as [header, segments...] (at most one header slab of them)."""
    arena = backend.header_arena()
    with arena.slab() as slab:
        objects = _objects(arena, slab, names, ptrs, sizes)

        def pack(which: range) -> None:  # hash each page (with verify_checksum) and write its header
            for n in which:
                digest, key = backend.digest(pages[n]), key_digest(names[n])
                pack_header(arena.view, slab + n * HEADER_SIZE, objects.totals[n] - HEADER_SIZE, digest, key)

        if backend.put_sessions:  # without checksums, never given up on (see put_in_session)
            codes = put_in_session(backend, objects, pack, (arena, slab), bounded=backend.verify_checksum)
        else:
            codes = _remove_then_put(backend, objects, pack, (arena, slab))
    return [code == 0 for code in codes]


def _remove_then_put(backend: MooncakeBackend, objects: Transfers, pack: Any, hold: tuple[SlabArena, int]) -> list[int]:
    """Remove (on a helper thread while the headers are packed), then multi-buffer put; final codes."""
    names = objects.names
    removing = backend.calls.in_background(backend.client.batch_remove, names, True)
    try:
        pack(range(len(names)))
    finally:
        removed_codes = backend.calls.wait_for(removing, "batch_remove", hold)
    codes = backend.check_codes(removed_codes, len(names), "batch_remove")
    # A key whose old object could not be removed is not put: put would keep the old value.
    todo = [n for n, code in enumerate(codes) if code in (0, OBJECT_NOT_FOUND)]
    if not todo:
        return codes
    put_args = ([names[n] for n in todo], [objects.ptrs[n] for n in todo], [objects.sizes[n] for n in todo])
    put = backend.calls.submit(backend.client.batch_put_from_multi_buffers, *put_args, backend.replicate)
    result = backend.calls.wait_for(put, "batch_put_from_multi_buffers", hold, bounded=backend.verify_checksum)
    for n, code in zip(todo, backend.check_codes(result, len(todo), "batch_put_from_multi_buffers"), strict=True):
        codes[n] = code
    return codes


def read_direct(
    backend: MooncakeBackend, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
) -> list[bool]:
    """Get into [header slot, segments...] for pages in registered memory (at most one slab); then check.

    The calls are those of ``get_calls`` (with ``"auto"``, the cheaper per byte read so far)."""
    arena = backend.header_arena()
    out = [False] * len(names)
    chooser = backend.get_calls if isinstance(backend.get_calls, FasterOf) else None
    way = chooser.pick() if chooser is not None else str(backend.get_calls)
    begin = time.perf_counter()
    with arena.slab() as slab:
        arena.view[slab : slab + len(names) * HEADER_SIZE] = bytes(len(names) * HEADER_SIZE)
        objects = _objects(arena, slab, names, ptrs, sizes)

        def check(n: int, code: int) -> None:
            if backend.complete(code, objects.totals[n]):
                out[n] = backend.accept(
                    arena.view, slab + n * HEADER_SIZE, names[n], pages[n], objects.totals[n] - HEADER_SIZE
                )

        if way == "session":  # each chunk checked as it lands (its bytes still in the CPU cache)
            checks = _ChunkChecks(check)
            try:
                result = backend.calls.call(
                    "get session", get_in_session, backend, objects, checks.chunk, hold=(arena, slab)
                )
            finally:
                checks.close()
            backend.check_codes(result, len(names), "get")  # objects never started stay misses
        else:
            call = backend.client.batch_get_into_multi_buffers
            result = backend.calls.call("get", call, names, objects.ptrs, objects.sizes, hold=(arena, slab))
            for n, code in enumerate(backend.check_codes(result, len(names), "get")):
                check(n, code)
        backend.counters.bump(f"mooncake_{way}_gets")
        if chooser is not None:
            chooser.record(way, time.perf_counter() - begin, sum(objects.totals[n] for n, ok in enumerate(out) if ok))
    return out


class _ChunkChecks:
    """Checks the pages of a read's chunks as they land; none once :meth:`close` has returned (a read
    given up on at its deadline returns while its transfers go on, into memory the caller reuses)."""

    def __init__(self, check: Callable[[int, int], None]) -> None:
        self._check = check
        self._lock = threading.Lock()
        self._open = True

    def chunk(self, positions: list[int], codes: list[int]) -> None:
        with self._lock:
            if self._open:
                for n in positions:
                    self._check(n, codes[n])

    def close(self) -> None:
        with self._lock:
            self._open = False
