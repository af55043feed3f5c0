"""Staged page transfers of the mooncake backend: each page copied with its header into a registered slab.

Used for pages outside registered memory (v0 flat tensors), with ``transfer: staged``, and with
``transfer: auto`` over TCP for small segments: one transfer buffer per page instead of one per
segment plus the header. Writes are ``batch_upsert_from`` (an overwrite in one call), reads
``batch_get_into`` then the header (and checksum) check, then a copy out; one staging slab-full
of pages per call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from hicache_storage.plugin import PageBuffers

from .memory import SlabArena
from .record import HEADER_SIZE, key_digest, pack_header

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


def write_staged(
    backend: MooncakeBackend, mkeys: list[str], pages: Sequence[PageBuffers], staged: list[int], out: list[bool]
) -> None:
    """Copy [header, page] records of the pages ``staged`` into a staging slab and upsert them; sets ``out``."""
    with _staging_slab(backend, staged, "mooncake_staged_writes") as (arena, slab, chunks):
        host, view = arena.array, arena.view
        for chunk in chunks:
            chunk_ptrs, chunk_sizes = [], []
            offset = slab
            for index in chunk:
                start = offset
                offset += HEADER_SIZE
                for segment in pages[index]:
                    host[offset : offset + segment.nbytes] = np.frombuffer(segment, np.uint8)
                    offset += segment.nbytes
                length = offset - start - HEADER_SIZE
                digest = backend.digest([view[start + HEADER_SIZE : offset]])
                pack_header(view, start, length, digest, key_digest(mkeys[index]))
                chunk_ptrs.append(arena.base + start)
                chunk_sizes.append(offset - start)
            codes = backend.check_codes(
                backend.calls.call(
                    "batch_upsert_from",
                    backend.client.batch_upsert_from,
                    [mkeys[i] for i in chunk],
                    chunk_ptrs,
                    chunk_sizes,
                    backend.replicate,
                    hold=(arena, slab),
                ),
                len(chunk),
                "batch_upsert_from",
            )
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
            codes = backend.check_codes(
                backend.calls.call(
                    "batch_get_into",
                    backend.client.batch_get_into,
                    [mkeys[i] for i in chunk],
                    [arena.base + s for s in starts],
                    totals,
                    hold=(arena, slab),
                ),
                len(chunk),
                "batch_get_into",
            )
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
