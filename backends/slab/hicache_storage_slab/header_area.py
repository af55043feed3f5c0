"""Whole header areas of slab files: every committed slot header, and blanking all of them."""

from __future__ import annotations

import errno
import os

from .layout import COMMITTED, ENTRY_SIZE, Entry, Geometry, decode_set

__all__ = ["blank_headers", "committed_entries"]


def committed_entries(fd: int, geometry: Geometry) -> list[Entry]:
    """The committed headers of one slab file, read in pieces of at most 1 MiB."""
    begin, end = geometry.header_offset, geometry.header_offset + geometry.sets_per_file * geometry.ways * ENTRY_SIZE
    step = max(ENTRY_SIZE, (1 << 20) // ENTRY_SIZE * ENTRY_SIZE)
    found: list[Entry] = []
    for offset in range(begin, end, step):
        size = min(step, end - offset)
        raw = os.pread(fd, size, offset)
        if len(raw) != size:
            raise OSError(errno.EIO, f"short read of slot headers at offset {offset}")
        found.extend(entry for entry in decode_set(raw, size // ENTRY_SIZE) if entry.state == COMMITTED)
    return found


def blank_headers(fd: int, geometry: Geometry) -> None:
    """Zero the header area of a slab file: every slot becomes empty."""
    begin, end = geometry.header_offset, geometry.data_offset
    chunk = bytes(min(end - begin, 1 << 20))
    offset = begin
    while offset < end:
        written = os.pwrite(fd, memoryview(chunk)[: min(len(chunk), end - offset)], offset)
        if written <= 0:
            raise OSError(errno.EIO, "could not blank slot headers")
        offset += written
