"""The header stored in front of every page object (32 bytes, little-endian).

=======  ====  =========================================================================
offset   size  field
=======  ====  =========================================================================
0        4     magic ``b"HCMC"``
4        1     format version (1)
5        1     flags: bit 0 ``UNHASHED`` (written with ``verify_checksum: false``; checksum is 0)
6        2     reserved (0)
8        8     payload length (u64): the page's bytes, i.e. the object size minus 32
16       8     XXH3-64 of the payload (u64)
24       8     XXH3-64 of the Mooncake object key (UTF-8, ``key_prefix`` included) (u64)
=======  ====  =========================================================================

The fields are those of :mod:`hicache_storage.plugin.page_format` plus the key digest, which catches bytes
of another object (Mooncake reuses freed memory while a reader may still be copying from it).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence

import xxhash

__all__ = [
    "FLAG_UNHASHED",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "RecordCheck",
    "check_header",
    "key_digest",
    "pack_header",
    "payload_checksum",
]

MAGIC = b"HCMC"
FORMAT_VERSION = 1
FLAG_UNHASHED = 0x01
_HEADER = struct.Struct("<4sBBHQQQ")
HEADER_SIZE = _HEADER.size  # 32

Buffer = bytes | bytearray | memoryview


class RecordCheck(enum.Enum):
    """Outcome of :func:`check_header` (and of the payload checksum)."""

    OK = "ok"
    BAD_HEADER = "header_mismatch"  # magic, version or length wrong
    OTHER_KEY = "key_mismatch"  # bytes of another object
    UNVERIFIED = "unverified"  # written without a checksum, read by a client that requires one
    BAD_CHECKSUM = "checksum_mismatch"


def key_digest(object_key: str) -> int:
    """XXH3-64 of an object key."""
    return xxhash.xxh3_64_intdigest(object_key.encode("utf-8"))


def payload_checksum(segments: Sequence[Buffer]) -> int:
    """XXH3-64 of the concatenation of ``segments``, hashed in place (the GIL is released while hashing)."""
    hasher = xxhash.xxh3_64()
    for segment in segments:
        hasher.update(segment)
    return hasher.intdigest()


def pack_header(into: memoryview, offset: int, length: int, digest: int | None, key: int) -> None:
    """Write a header at ``into[offset:]``; ``digest=None`` marks the payload as not checksummed."""
    flags = FLAG_UNHASHED if digest is None else 0
    _HEADER.pack_into(into, offset, MAGIC, FORMAT_VERSION, flags, 0, length, digest or 0, key)


def check_header(header: Buffer, offset: int, length: int, key: int, need_checksum: bool) -> tuple[RecordCheck, int]:
    """(verdict on the header at ``header[offset:]``, stored payload checksum) for an expected length and key.

    ``OK`` means the payload checksum (second item) is still to be compared when ``need_checksum``.
    """
    magic, version, flags, _reserved, stored_length, digest, stored_key = _HEADER.unpack_from(header, offset)
    if magic != MAGIC or version != FORMAT_VERSION or stored_length != length:
        return RecordCheck.BAD_HEADER, 0
    if stored_key != key:
        return RecordCheck.OTHER_KEY, 0
    if need_checksum and flags & FLAG_UNHASHED:
        return RecordCheck.UNVERIFIED, 0
    return RecordCheck.OK, int(digest)
