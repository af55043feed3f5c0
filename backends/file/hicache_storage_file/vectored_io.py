"""Vectored whole-buffer I/O: ``os.writev`` / ``os.preadv`` looped over short transfers, no copies."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["IOV_MAX", "preadv_all", "writev_all"]

Buffer = bytes | bytearray | memoryview

try:
    IOV_MAX = max(16, int(os.sysconf("SC_IOV_MAX")))
except (AttributeError, ValueError, OSError):  # pragma: no cover - platform without sysconf
    IOV_MAX = 1024


def _advance(pending: list[memoryview], count: int) -> None:
    """Drop ``count`` transferred bytes from the front of ``pending``."""
    while count and pending:
        first = pending[0]
        if count >= first.nbytes:
            count -= first.nbytes
            pending.pop(0)
        else:
            pending[0] = first[count:]
            count = 0


def writev_all(fd: int, buffers: Sequence[Buffer]) -> int:
    """Write every byte of ``buffers`` in order to ``fd``; returns the byte count."""
    pending = [view for view in map(memoryview, buffers) if view.nbytes]
    total = 0
    while pending:
        written = os.writev(fd, pending[:IOV_MAX])
        if written <= 0:
            raise OSError(f"writev wrote {written} bytes with {sum(v.nbytes for v in pending)} pending")
        total += written
        _advance(pending, written)
    return total


def preadv_all(fd: int, buffers: Sequence[memoryview | bytearray], offset: int = 0) -> int:
    """Fill ``buffers`` in order from ``fd`` at ``offset`` until they are full or the file ends.

    Returns the number of bytes read; fewer than the buffers hold means the file was shorter.
    """
    pending = [view for view in map(memoryview, buffers) if view.nbytes]
    total = 0
    while pending:
        count = os.preadv(fd, pending[:IOV_MAX], offset + total)
        if count <= 0:
            break
        total += count
        _advance(pending, count)
    return total
