"""The stored page record shared by byte-oriented backends: a 24-byte header, then the payload.

Header (little-endian): magic ``b"HCKV"``, format version (u8), flags (u8, 0), reserved (u16, 0),
payload length (u64), XXH3-64 of the payload (u64). A record whose magic, version, length or
checksum does not match reads as a miss, never as data.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import xxhash

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "RECORD_VERSION",
    "PageRecordError",
    "checksum",
    "decode_into",
    "encode_header",
    "encode_record",
    "parse_header",
]

MAGIC = b"HCKV"
RECORD_VERSION = 1
_HEADER = struct.Struct("<4sBBHQQ")
HEADER_SIZE = _HEADER.size  # 24

Buffer = bytes | bytearray | memoryview


class PageRecordError(ValueError):
    """A stored record is malformed (bad magic, version, length or checksum)."""


def checksum(segments: Sequence[Buffer]) -> int:
    """XXH3-64 of the concatenation of ``segments``."""
    hasher = xxhash.xxh3_64()
    for segment in segments:
        hasher.update(segment)
    return hasher.intdigest()


def encode_header(segments: Sequence[Buffer]) -> bytes:
    """Header for a payload made of ``segments`` (checksummed without joining them)."""
    length = sum(memoryview(s).nbytes for s in segments)
    return _HEADER.pack(MAGIC, RECORD_VERSION, 0, 0, length, checksum(segments))


def encode_record(segments: Sequence[Buffer]) -> bytes:
    """Header and payload as one ``bytes`` (one join; for clients that need a single blob)."""
    return b"".join([encode_header(segments), *segments])


def parse_header(header: Buffer, expected_length: int | None = None) -> tuple[int, int]:
    """(payload length, checksum) from a header; raises :class:`PageRecordError` if invalid."""
    view = memoryview(header)
    if view.nbytes < HEADER_SIZE:
        raise PageRecordError(f"record is {view.nbytes} bytes, shorter than its {HEADER_SIZE}-byte header")
    magic, version, _flags, _reserved, length, digest = _HEADER.unpack(view[:HEADER_SIZE])
    if magic != MAGIC:
        raise PageRecordError(f"bad magic {bytes(magic)!r}")
    if version != RECORD_VERSION:
        raise PageRecordError(f"record version {version}, expected {RECORD_VERSION}")
    if expected_length is not None and length != expected_length:
        raise PageRecordError(f"payload length {length}, expected {expected_length}")
    return int(length), int(digest)


def decode_into(record: Buffer, segments: Sequence[memoryview]) -> bool:
    """Check ``record`` and scatter its payload into ``segments``; ``False`` if it is invalid.

    On ``False`` the segments may hold partial data, which callers treat as a miss.
    """
    view = memoryview(record).cast("B")
    expected = sum(s.nbytes for s in segments)
    try:
        length, digest = parse_header(view, expected)
    except PageRecordError:
        return False
    if view.nbytes != HEADER_SIZE + length:
        return False
    offset = HEADER_SIZE
    for segment in segments:
        size = segment.nbytes
        segment.cast("B")[:] = view[offset : offset + size]
        offset += size
    return checksum(segments) == digest
