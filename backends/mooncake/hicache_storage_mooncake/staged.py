"""Staged page transfers of the mooncake backend: each page copied with its header into a registered slab.

Used for pages outside registered memory (v0 flat tensors), with ``transfer: staged``, and with
``transfer: auto`` over TCP for small segments: one transfer buffer per page instead of one per
segment plus the header. One staging slab-full of pages per call. Writes go through a put session
(:func:`~hicache_storage_mooncake.sessions.put_in_session`: pages are copied and hashed chunk by
chunk while earlier chunks travel), else ``batch_upsert_from`` (an overwrite in one call); reads
through a get session, else ``batch_get_into``, then the header (and checksum) check, then a copy
out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from hicache_storage.plugin import PageBuffers

from .memory import SlabArena
from .record import HEADER_SIZE, key_digest, pack_header
from .sessions import Transfers, get_in_session, put_in_session

if TYPE_CHECKING:
    from .backend import MooncakeBackend

__all__ = ["read_staged", "write_staged"]


@contextmanager
def _staging_slab(
    backend: MooncakeBackend, staged: list[int], counter: str
) -> Iterator[tuple[SlabArena, int, list[list[int]]]]:
    """The staging arena with one slab held, and the indices ``staged`` in slab-fulls; counts them."""
    arena = backend.staging_arena()
    backend.counters.bump(counter, len(staged))
    with arena.slab() as slab:
        step = arena.per_slab
        yield arena, slab, [staged[begin : begin + step] for begin in range(0, len(staged), step)]


def _stage(
    backend: MooncakeBackend,
    arena: SlabArena,
    pages: list[PageBuffers],
    records: tuple[list[int], list[str]],
    which: range,
) -> None:
    """Copy pages ``which`` behind their header slots at ``records`` (offsets, object names), hash them
    there and pack their headers."""
    host, view = arena.array, arena.view
    starts, names = records
    for n in which:
        offset = starts[n] + HEADER_SIZE
        for segment in pages[n]:
            host[offset : offset + segment.nbytes] = np.frombuffer(segment, np.uint8)
            offset += segment.nbytes
        payload = view[starts[n] + HEADER_SIZE : offset]
        pack_header(view, starts[n], len(payload), backend.digest([payload]), key_digest(names[n]))


def write_staged(
    backend: MooncakeBackend, mkeys: list[str], pages: Sequence[PageBuffers], staged: list[int], out: list[bool]
) -> None:
    """Copy [header, page] records of the pages ``staged`` into a staging slab and store them; sets ``out``."""
    with _staging_slab(backend, staged, "mooncake_staged_writes") as (arena, slab, chunks):
        for chunk in chunks:
            totals = [HEADER_SIZE + sum(segment.nbytes for segment in pages[index]) for index in chunk]
            starts = [slab + sum(totals[:n]) for n in range(len(chunk))]
            names = [mkeys[index] for index in chunk]

            stage = partial(_stage, backend, arena, [pages[index] for index in chunk], (starts, names))
            objects = Transfers(names, [[arena.base + start] for start in starts], [[total] for total in totals])
            if backend.put_sessions:
                codes = put_in_session(backend, objects, stage, (arena, slab))
            else:
                stage(range(len(chunk)))
                call = backend.client.batch_upsert_from
                ptrs = [row[0] for row in objects.ptrs]
                result = backend.calls.call(
                    "batch_upsert_from", call, names, ptrs, totals, backend.replicate, hold=(arena, slab)
                )
                codes = backend.check_codes(result, len(chunk), "batch_upsert_from")
            for index, code in zip(chunk, codes, strict=True):
                out[index] = code == 0


def read_staged(
    backend: MooncakeBackend, mkeys: list[str], pages: Sequence[PageBuffers], staged: list[int], out: list[bool]
) -> None:
    """Get records of the pages ``staged`` into a staging slab, check each, copy the good pages out; sets ``out``."""
    with _staging_slab(backend, staged, "mooncake_staged_reads") as (arena, slab, chunks):
        host, view = arena.array, arena.view
        for chunk in chunks:
            totals = [HEADER_SIZE + sum(segment.nbytes for segment in pages[index]) for index in chunk]
            starts = [slab + sum(totals[:n]) for n in range(len(chunk))]
            names = [mkeys[i] for i in chunk]
            ptrs = [arena.base + start for start in starts]
            if backend.get_sessions:
                objects = Transfers(names, [[ptr] for ptr in ptrs], [[total] for total in totals])
                result = backend.calls.call("get session", get_in_session, backend, objects, hold=(arena, slab))
            else:
                call = backend.client.batch_get_into
                result = backend.calls.call("batch_get_into", call, names, ptrs, totals, hold=(arena, slab))
            codes = backend.check_codes(result, len(chunk), "get")
            for index, code, start, total in zip(chunk, codes, starts, totals, strict=True):
                if not backend.complete(code, total):
                    continue
                payload = view[start + HEADER_SIZE : start + total]
                if not backend.accept(view, start, mkeys[index], [payload], total - HEADER_SIZE):
                    continue
                offset = start + HEADER_SIZE
                for segment in pages[index]:
                    np.frombuffer(segment, np.uint8)[:] = host[offset : offset + segment.nbytes]
                    offset += segment.nbytes
                out[index] = True
