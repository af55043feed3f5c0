"""The records of the slab index and their encodings (LMDB keys and values; integers in keys are
big-endian so that keys sort by them).

=========  ===================================================  =========================================
database   key                                                  value
=========  ===================================================  =========================================
pages      key digest (16 B)                                    :class:`Entry`
recency    group u16, chunk size u32, tier u8, seq u64, digest  empty (the oldest key of a prefix is the
                                                                victim)
slots      slot reference u64                                   key digest of the committed page there
claims     slot reference u64                                   :class:`Claim` (a write in flight)
free       chunk size u32, slot reference u64                   empty (a slot given back)
regions    region u32                                           :class:`Region`
spare      region u32                                           empty (a region no chunk size holds)
sizes      chunk size u32                                       :class:`SizeClass`
groups     ``b"n"`` + namespace / ``b"i"`` + group u16          group u16 / bytes held u64
meta       ``b"store"``                                         the store's id (16 B)
=========  ===================================================  =========================================

A *slot reference* is ``region << 32 | slot``. ``seq`` orders pages for replacement: the time in
nanoseconds of the page's last write or read that made it recent, lowered by its position in the
batch so that the later pages of a chain are older than the earlier ones (tails go first).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "CLAIM",
    "COMMITTED_TIER",
    "ENTRY",
    "PINNED",
    "checksum_seed",
    "Claim",
    "Entry",
    "Region",
    "SizeClass",
    "decode_entry",
    "encode_entry",
    "key_digest",
    "one_chunk",
    "pack",
    "recency_key",
    "recency_prefix",
    "slot_ref",
    "split_ref",
    "unpack",
]

#: Tier of pages of a pinned deployment: replaced only when no other page of their size is left.
PINNED = 1
COMMITTED_TIER = 0
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_RECENCY = struct.Struct(">HIBQ")
#: version, tier, group, chunks, key length, chunk size, length, seq, checksum, written ns, auth length
ENTRY = struct.Struct("<BBHHHIQQQQB")
_VERSION = 1
CLAIM = struct.Struct("<16sQQ")  # digest, writer, claimed at (ns)
_REGION = struct.Struct("<III")  # chunk size, slots used (bump), live slots (claimed or committed)
_SIZE = struct.Struct("<II")  # regions, region being filled (NO_REGION: none)
NO_REGION = 0xFFFFFFFF


def key_digest(key: bytes) -> bytes:
    """BLAKE2b-128 of a storage key: the key of its entry and the seed of its payload checksum."""
    return hashlib.blake2b(key, digest_size=16).digest()


def checksum_seed(digest: bytes) -> int:
    """The XXH3 seed of a page's payload checksum (the digest's last 8 bytes): a page's bytes fail the
    check of any other key."""
    return int.from_bytes(digest[8:16], "little")


def slot_ref(region: int, slot: int) -> int:
    return region << 32 | slot


def split_ref(ref: int) -> tuple[int, int]:
    """(region, slot) of a slot reference."""
    return ref >> 32, ref & 0xFFFFFFFF


def u16(value: int) -> bytes:
    return _U16.pack(value)


def u32(value: int) -> bytes:
    return _U32.pack(value)


def u64(value: int) -> bytes:
    return _U64.pack(value)


def read_u16(raw: bytes) -> int:
    return int(_U16.unpack(raw)[0])


def read_u32(raw: bytes) -> int:
    return int(_U32.unpack_from(raw)[0])


def read_u64(raw: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(raw, offset)[0])


def recency_prefix(group: int, chunk_bytes: int, tier: int) -> bytes:
    """Prefix of the recency keys of one group's pages of one chunk size and tier."""
    return _RECENCY.pack(group, chunk_bytes, tier, 0)[:7]


def recency_key(group: int, chunk_bytes: int, tier: int, seq: int, digest: bytes) -> bytes:
    return _RECENCY.pack(group, chunk_bytes, tier, seq) + digest


def recency_seq(key: bytes) -> int:
    """The ``seq`` of a recency key."""
    return read_u64(key, 7)


class Entry(NamedTuple):
    """A committed page: where its chunks are and what its bytes must hash to."""

    tier: int
    group: int
    chunk_bytes: int
    length: int
    seq: int
    checksum: int
    written_ns: int
    refs: tuple[int, ...]
    auth: bytes
    key: bytes

    def recency_key(self, digest: bytes) -> bytes:
        return recency_key(self.group, self.chunk_bytes, self.tier, self.seq, digest)

    @property
    def stored_bytes(self) -> int:
        return len(self.refs) * self.chunk_bytes


_HEAD = struct.Struct("<BBHHHIQ")  # the entry's fields before its seq
_SEQ = struct.Struct("<Q")


def with_seq(raw: bytes, seen: int, seq: int) -> tuple[bytes, bytes, bytes] | None:
    """An encoded entry made recent without decoding it: (its old recency key, its new one, the new
    entry), or ``None`` when its ``seq`` is not ``seen`` any more (written or made recent since).
    The digest is appended to each recency key by the caller."""
    _version, tier, group, _chunks, _key_len, chunk, _length = _HEAD.unpack_from(raw)
    (current,) = _SEQ.unpack_from(raw, _HEAD.size)
    if current != seen or seq <= current:
        return None
    head = _RECENCY.pack(group, chunk, tier, 0)[:7]
    return head + u64(current), head + u64(seq), raw[: _HEAD.size] + _SEQ.pack(seq) + raw[_HEAD.size + 8 :]


def encode_entry(entry: Entry) -> bytes:
    head = ENTRY.pack(
        _VERSION,
        entry.tier,
        entry.group,
        len(entry.refs),
        len(entry.key),
        entry.chunk_bytes,
        entry.length,
        entry.seq,
        entry.checksum,
        entry.written_ns,
        len(entry.auth),
    )
    return head + _refs(len(entry.refs)).pack(*entry.refs) + entry.auth + entry.key


#: An entry's fixed fields followed by its one slot reference.
_ONE_CHUNK = struct.Struct(ENTRY.format + "Q")


@functools.cache
def _refs(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}Q")


def decode_entry(raw: bytes) -> Entry:
    """The entry encoded in ``raw``; :class:`ValueError` for another version or a short record."""
    try:
        version, tier, group, chunks, key_len, chunk, length, seq, checksum, written, auth_len = ENTRY.unpack_from(raw)
    except struct.error as error:
        raise ValueError(f"not an index entry: {error}") from None
    if version != _VERSION:
        raise ValueError(f"index entry of version {version}, expected {_VERSION}")
    offset = ENTRY.size
    refs = _refs(chunks).unpack_from(raw, offset)
    offset += 8 * chunks
    auth = bytes(raw[offset : offset + auth_len])
    offset += auth_len
    key = bytes(raw[offset : offset + key_len])
    if len(key) != key_len:
        raise ValueError("not an index entry: short record")
    return Entry(tier, group, chunk, length, seq, checksum, written, refs, auth, key)


def one_chunk(raw: bytes, key: bytes) -> tuple[int, int, int, int, int] | None:
    """(slot reference, chunk size, length, seq, checksum) of ``raw`` when it is the entry of ``key`` for
    a page stored as one chunk without an authentication tag; ``None`` for any other entry (decode it
    with :func:`decode_entry`). What a read's hot path needs, without building an :class:`Entry`."""
    if len(raw) != _ONE_CHUNK.size + len(key) or not raw.endswith(key):
        return None
    version, _tier, _group, chunks, key_len, chunk, length, seq, checksum, _written, auth_len, ref = (
        _ONE_CHUNK.unpack_from(raw)
    )
    if version != _VERSION or chunks != 1 or auth_len or key_len != len(key):
        return None
    return ref, chunk, length, seq, checksum


class Claim(NamedTuple):
    """A slot a write has taken and not committed yet."""

    digest: bytes
    writer: int
    claimed_ns: int


class Region(NamedTuple):
    """A region lent to one chunk size: its slots ``[0, used)`` have been handed out, ``live`` are in use."""

    chunk_bytes: int
    used: int
    live: int


class SizeClass(NamedTuple):
    """The regions lent to one chunk size, and the one whose unused slots are handed out next."""

    regions: int
    filling: int


#: The fixed-size records and their encodings.
_FORMATS: dict[type[Any], struct.Struct] = {Claim: CLAIM, Region: _REGION, SizeClass: _SIZE}
Record = TypeVar("Record", Claim, Region, SizeClass)


def pack(record: Claim | Region | SizeClass) -> bytes:
    """The bytes of a fixed-size record."""
    return _FORMATS[type(record)].pack(*record)


def unpack(kind: type[Record], raw: bytes) -> Record:
    """The record of ``kind`` encoded in ``raw``."""
    return kind(*_FORMATS[kind].unpack(raw))
