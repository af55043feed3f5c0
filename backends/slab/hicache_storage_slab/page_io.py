"""Moving one page between host memory and its slot: one vectored call each way, hashed as it passes."""

from __future__ import annotations

import ctypes
import errno
from collections.abc import Sequence

import xxhash

from hicache_storage.plugin.vectored_io import preadv_all, pwritev_all

from .geometry import BLOCK
from .records import checksum_seed

__all__ = [
    "DIRECT_ALIGN",
    "DirectRefused",
    "direct_aligned",
    "page_checksum",
    "read_hashed",
    "segment_range",
    "write_hashed",
]

#: Memory and length alignment asked of a page before it is moved with ``O_DIRECT``.
DIRECT_ALIGN = BLOCK
_Hasher = xxhash.xxh3_64


class DirectRefused(Exception):
    """The kernel refused an ``O_DIRECT`` transfer before moving any byte (``EINVAL``)."""


def write_hashed(fd: int, page: Sequence[memoryview], offset: int, length: int, hasher: xxhash.xxh3_64) -> None:
    """``pwritev`` ``page`` at ``offset`` in one call, then hash it: the copy has just pulled the bytes into
    the CPU cache, where the hash finds them (hashing first would read them from memory; writing in
    pieces costs a file system write path per piece).

    Raises :class:`DirectRefused` when the kernel refuses the write with ``EINVAL``.
    """
    try:
        pwritev_all(fd, page, offset, length)
    except OSError as error:
        if error.errno == errno.EINVAL:
            raise DirectRefused from error
        raise
    for segment in page:
        hasher.update(segment)


def read_hashed(fd: int, page: Sequence[memoryview], offset: int, length: int, hasher: xxhash.xxh3_64) -> bool:
    """``preadv`` ``page`` from ``offset`` in one call, then hash it; ``False`` for a short read.

    One call per page: a cold page is then one read of the drive, not one per piece. Raises
    :class:`DirectRefused` as :func:`write_hashed`.
    """
    try:
        done = preadv_all(fd, page, offset)
    except OSError as error:
        if error.errno == errno.EINVAL:
            raise DirectRefused from error
        raise
    if done != length:
        return False
    for segment in page:
        hasher.update(segment)
    return True


def page_checksum(page: Sequence[memoryview], digest: bytes) -> int:
    hasher = _Hasher(seed=checksum_seed(digest))
    for segment in page:
        hasher.update(segment)
    return int(hasher.intdigest())


def _address(view: memoryview) -> int | None:
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    except (TypeError, ValueError):
        return None


def direct_aligned(page: Sequence[memoryview]) -> bool:
    """Whether every segment's address and length are multiples of :data:`DIRECT_ALIGN`."""
    for segment in page:
        if segment.nbytes % DIRECT_ALIGN:
            return False
        address = _address(segment)
        if address is None or address % DIRECT_ALIGN:
            return False
    return True


def segment_range(page: Sequence[memoryview], offset: int, length: int) -> list[memoryview]:
    """The views of ``page`` (its segments in order) that cover bytes ``[offset, offset + length)``."""
    views: list[memoryview] = []
    position = 0
    end = offset + length
    for segment in page:
        size = segment.nbytes
        if position + size > offset and position < end:
            flat = segment if segment.ndim == 1 and segment.format == "B" else segment.cast("B")
            views.append(flat[max(0, offset - position) : min(size, end - position)])
        position += size
        if position >= end:
            break
    return views
