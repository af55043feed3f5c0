"""On-disk format of a slab: geometry, the superblock, slot headers, key digests and page checksums.

A key space's slab is ``files`` files named ``<key space prefix>slab-<i>``. Each file is::

    [superblock: 4 KiB]
    [slot headers: sets_per_file x ways x 64 B, padded to the slots' alignment]
    [slots: sets_per_file x ways x slot_bytes]

``slot_bytes`` is the page size rounded up to 4 KiB, and the slots start at a multiple of the largest
power of two (up to 2 MiB) dividing it: every slot starts on a 4 KiB boundary (what ``O_DIRECT``
needs), and a 512 KiB slot on a 512 KiB one (one large folio in the page cache). Set ``s`` lives in
file ``s % files`` as local set ``s // files``; the headers of one set are contiguous (one small
``pread`` finds a key), its slots too.

Slot header (256 bytes, little-endian)::

    magic "HSLT" | version u8 | state u8 | key length u16 | length u64 | seq u64
    | key digest 16 B | payload checksum u64 | writer u64
    | authentication record 56 B | storage key 136 B | header check u64

- ``key digest``: BLAKE2b-128 of the full storage key; the set is chosen by its first 8 bytes.
- ``payload checksum``: XXH3-64 of the page bytes seeded with the digest's last 8 bytes, so a payload
  also fails the check of any other key.
- ``seq``: a write's generation (nanoseconds since the epoch, raised above every seq in the set):
  the newest committed copy of a key wins, and the oldest slot of a set is the eviction victim.
- ``writer``: who claimed the slot (random per instance, plus a counter), to notice a lost claim.
- ``authentication record``: with an integrity secret, the record header of
  :class:`~hicache_storage.plugin.page_format.RecordCodec` (its HMAC tag covers the key and the
  payload); zeros without one.
- ``storage key`` (``key length`` bytes of it; 0 for a key longer than :data:`MAX_KEY_BYTES`, which is
  stored and read as any other but not listed): what a listing of the slab returns.
- ``header check``: XXH3-64 of the first 248 bytes; a torn or damaged header fails it.

An all-zero header is an empty slot (a fresh, fallocated file reads as zeros). Files of layout
version 1 (64-byte headers, no keys) are refused with :class:`LegacyLayoutError`.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import xxhash

from hicache_storage.plugin import ConfigError

__all__ = [
    "BLOCK",
    "COMMITTED",
    "DAMAGED",
    "EMPTY",
    "ENTRY_SIZE",
    "MAX_KEY_BYTES",
    "LegacyLayoutError",
    "SUPERBLOCK_SIZE",
    "WRITING",
    "Entry",
    "Geometry",
    "SuperblockError",
    "decode_entry",
    "decode_set",
    "decode_superblock",
    "digest_at",
    "encode_entry",
    "encode_superblock",
    "checksum_seed",
    "find_committed",
    "key_digest",
    "parse_superblock",
    "payload_checksum",
    "space_tag",
]

BLOCK = 4096
ENTRY_SIZE = 256
#: Longest storage key (UTF-8 bytes) a slot header names; longer keys are stored but not listed.
MAX_KEY_BYTES = 136
#: Size of the authentication record field (a ``RecordCodec`` header).
AUTH_BYTES = 56
SUPERBLOCK_SIZE = BLOCK
#: Largest alignment of the slot area (see :func:`_slot_alignment`).
SLOT_ALIGN_MAX = 2 << 20
FORMAT_VERSION = 2
#: The layout before storage keys and authentication records went into the slot headers.
LEGACY_VERSION = 1

EMPTY = 0
WRITING = 1
COMMITTED = 2
#: Not a stored state: what :func:`decode_entry` reports for a header that is neither blank nor valid.
DAMAGED = 255

_ENTRY = struct.Struct(f"<4sBBHQQ16sQQ{AUTH_BYTES}s{MAX_KEY_BYTES}s")
_CHECK = struct.Struct("<Q")
_ENTRY_MAGIC = b"HSLT"
_BLANK = bytes(ENTRY_SIZE)
assert _ENTRY.size + _CHECK.size == ENTRY_SIZE

_SUPER = struct.Struct("<8sIIIIQQQQQQ16s")
_SUPER_MAGIC = b"HCSLAB\x00\x01"


def key_digest(storage_key: str) -> bytes:
    """16-byte BLAKE2b digest of a full storage key (what a slot header names)."""
    return hashlib.blake2b(storage_key.encode(), digest_size=16).digest()


def space_tag(prefix: str) -> bytes:
    """16-byte tag of a key space prefix, kept in the superblock of its slab files."""
    return hashlib.blake2b(prefix.encode(), digest_size=16, person=b"hicache-slab").digest()


def checksum_seed(digest: bytes) -> int:
    """The XXH3 seed of a key's payload checksum (the digest's last 8 bytes)."""
    return int.from_bytes(digest[8:16], "little")


def payload_checksum(segments: Sequence[memoryview], digest: bytes) -> int:
    """XXH3-64 of the concatenated ``segments``, seeded by ``digest`` (binds the bytes to the key).

    The slab hashes a page in pieces as it moves them (streaming XXH3 gives the one-shot digest); this
    is the same checksum in one call.
    """
    # The streaming hasher releases the GIL while it hashes (the one-shot functions do not), so the
    # I/O threads of a batch hash in parallel.
    hasher = xxhash.xxh3_64(seed=checksum_seed(digest))
    for segment in segments:
        hasher.update(segment)
    return int(hasher.intdigest())


class Entry(NamedTuple):
    """A decoded slot header (``state`` is :data:`EMPTY`, :data:`WRITING`, :data:`COMMITTED` or :data:`DAMAGED`)."""

    state: int
    length: int = 0
    seq: int = 0
    digest: bytes = b""
    checksum: int = 0
    writer: int = 0
    auth: bytes = b""
    key: bytes = b""


_EMPTY_ENTRY = Entry(EMPTY)
_DAMAGED_ENTRY = Entry(DAMAGED)
_VALID_STATES = frozenset((EMPTY, WRITING, COMMITTED))
_unpack_body = _ENTRY.unpack_from
_unpack_check = _CHECK.unpack_from
_check_of = xxhash.xxh3_64_intdigest
_iter_headers = struct.Struct(f"<4sBBHQQ16sQQ{AUTH_BYTES}s{MAX_KEY_BYTES}sQ").iter_unpack
_new_entry = tuple.__new__
#: Offset of the key digest in a slot header.
_DIGEST_AT = 24


def encode_entry(
    state: int, length: int, seq: int, digest: bytes, *, checksum: int, writer: int, key: bytes = b"", auth: bytes = b""
) -> bytes:
    """The :data:`ENTRY_SIZE` header bytes of a slot (``key`` is dropped when longer than :data:`MAX_KEY_BYTES`)."""
    if len(key) > MAX_KEY_BYTES:
        key = b""
    if len(auth) not in (0, AUTH_BYTES):
        raise ValueError(f"an authentication record is {AUTH_BYTES} bytes, got {len(auth)}")
    body = _ENTRY.pack(_ENTRY_MAGIC, FORMAT_VERSION, state, len(key), length, seq, digest, checksum, writer, auth, key)
    return body + _CHECK.pack(xxhash.xxh3_64_intdigest(body))


def decode_entry(raw: bytes, offset: int = 0) -> Entry:
    """Decode the header at ``offset`` of ``raw``; blank is :data:`EMPTY`, anything invalid :data:`DAMAGED`."""
    end = offset + ENTRY_SIZE
    if raw[offset:end] == _BLANK:
        return _EMPTY_ENTRY
    if _unpack_check(raw, offset + _ENTRY.size)[0] != _check_of(raw[offset : offset + _ENTRY.size]):
        return _DAMAGED_ENTRY
    magic, version, state, key_length, length, seq, digest, checksum, writer, auth, key = _unpack_body(raw, offset)
    if magic != _ENTRY_MAGIC or version != FORMAT_VERSION or state not in _VALID_STATES or key_length > MAX_KEY_BYTES:
        return _DAMAGED_ENTRY
    return Entry(state, length, seq, digest, checksum, writer, auth, key[:key_length])


def decode_set(raw: bytes, ways: int) -> list[Entry]:
    """Every header of a set read in one piece (what :func:`decode_entry` gives for each, in one pass)."""
    entries: list[Entry] = []
    offset = 0
    for magic, version, state, key_length, length, seq, digest, checksum, writer, auth, key, check in _iter_headers(
        raw[: ways * ENTRY_SIZE]
    ):
        if magic != _ENTRY_MAGIC:
            entries.append(_EMPTY_ENTRY if raw[offset : offset + ENTRY_SIZE] == _BLANK else _DAMAGED_ENTRY)
        elif (
            version != FORMAT_VERSION
            or state not in _VALID_STATES
            or key_length > MAX_KEY_BYTES
            or check != _check_of(raw[offset : offset + _ENTRY.size])
        ):
            entries.append(_DAMAGED_ENTRY)
        else:
            entries.append(_new_entry(Entry, (state, length, seq, digest, checksum, writer, auth, key[:key_length])))
        offset += ENTRY_SIZE
    return entries


def find_committed(raw: bytes, digest: bytes) -> tuple[int, Entry] | None:
    """(way, header) of the committed copy of ``digest`` with the highest ``seq`` among a set's raw headers."""
    best: tuple[int, Entry] | None = None
    position = raw.find(digest, _DIGEST_AT)
    while position >= 0:
        if position % ENTRY_SIZE == _DIGEST_AT:
            way = position // ENTRY_SIZE
            entry = decode_entry(raw, way * ENTRY_SIZE)
            if entry.state == COMMITTED and entry.digest == digest and (best is None or entry.seq > best[1].seq):
                best = (way, entry)
        position = raw.find(digest, position + 1)
    return best


def digest_at(raw: bytes, way: int) -> bytes:
    """The key digest field of header ``way`` in the raw headers of a set (not validated)."""
    start = way * ENTRY_SIZE + _DIGEST_AT
    return raw[start : start + 16]


@dataclass(frozen=True)
class Geometry:
    """Shape of one key space's slab (identical in every process that uses it)."""

    page_bytes: int
    slot_bytes: int
    ways: int
    sets: int
    files: int

    @classmethod
    def plan(cls, page_bytes: int, capacity_bytes: int, ways: int, file_bytes: int) -> Geometry:
        """The largest slab of ``capacity_bytes`` (files, headers and padding included) for pages of ``page_bytes``."""
        if page_bytes <= 0:
            raise ConfigError("mem_pool_host", f"pages must hold at least one byte, got {page_bytes}")
        slot_bytes = _round_up(page_bytes, BLOCK)
        files = max(1, math.ceil(capacity_bytes / file_bytes))
        usable = capacity_bytes - files * (SUPERBLOCK_SIZE + BLOCK + _slot_alignment(slot_bytes))
        slots = usable // (slot_bytes + ENTRY_SIZE)
        if slots < 1:
            raise ConfigError(
                "extra_config.capacity_bytes",
                f"{capacity_bytes} bytes cannot hold one slot of {slot_bytes} bytes (pages of {page_bytes} bytes)",
            )
        ways = min(ways, slots)
        sets = slots // ways
        files = min(files, sets)
        sets -= sets % files
        return cls(page_bytes, slot_bytes, ways, sets, files)

    @property
    def sets_per_file(self) -> int:
        return self.sets // self.files

    @property
    def header_offset(self) -> int:
        return SUPERBLOCK_SIZE

    @property
    def data_offset(self) -> int:
        """Start of the slots: past the headers, at a multiple of the slots' alignment."""
        headers_end = SUPERBLOCK_SIZE + _round_up(self.sets_per_file * self.ways * ENTRY_SIZE, BLOCK)
        return _round_up(headers_end, _slot_alignment(self.slot_bytes))

    @property
    def file_size(self) -> int:
        return self.data_offset + self.sets_per_file * self.ways * self.slot_bytes

    @property
    def total_bytes(self) -> int:
        """Bytes of all files of the slab."""
        return self.files * self.file_size

    @property
    def slots(self) -> int:
        return self.sets * self.ways

    def locate(self, digest: bytes) -> tuple[int, int]:
        """(file index, local set) of a key digest."""
        number = int.from_bytes(digest[:8], "little") % self.sets
        return number % self.files, number // self.files

    def set_header_offset(self, local_set: int) -> int:
        return SUPERBLOCK_SIZE + local_set * self.ways * ENTRY_SIZE

    def slot_offset(self, local_set: int, way: int) -> int:
        return self.data_offset + (local_set * self.ways + way) * self.slot_bytes


class SuperblockError(ValueError):
    """A slab file's superblock is missing, damaged, or describes another slab."""


class LegacyLayoutError(SuperblockError):
    """A slab file of an earlier layout version (see :data:`LEGACY_VERSION`)."""


def encode_superblock(geometry: Geometry, file_index: int, tag: bytes) -> bytes:
    """The superblock of file ``file_index`` (padded to :data:`SUPERBLOCK_SIZE`)."""
    body = _SUPER.pack(
        _SUPER_MAGIC,
        FORMAT_VERSION,
        file_index,
        geometry.files,
        geometry.ways,
        geometry.sets,
        geometry.page_bytes,
        geometry.slot_bytes,
        geometry.header_offset,
        geometry.data_offset,
        geometry.file_size,
        tag,
    )
    record = body + _CHECK.pack(xxhash.xxh3_64_intdigest(body))
    return record + bytes(SUPERBLOCK_SIZE - len(record))


def decode_superblock(raw: bytes, geometry: Geometry, file_index: int, tag: bytes) -> None:
    """Raise :class:`SuperblockError` unless ``raw`` is the superblock ``encode_superblock`` would write."""
    if parse_superblock(raw) != (geometry, file_index, tag):
        raise SuperblockError("superblock describes another geometry or key space")


def parse_superblock(raw: bytes) -> tuple[Geometry, int, bytes]:
    """(geometry, file index, key space tag) of a valid superblock; :class:`SuperblockError` otherwise."""
    if len(raw) < _SUPER.size + _CHECK.size:
        raise SuperblockError("short superblock")
    body = raw[: _SUPER.size]
    (check,) = _CHECK.unpack_from(raw, _SUPER.size)
    if check != xxhash.xxh3_64_intdigest(body):
        raise SuperblockError("superblock check failed")
    magic, version, index, files, ways, sets, page_bytes, slot_bytes, _hdr, _data, _size, tag = _SUPER.unpack(body)
    if magic == _SUPER_MAGIC and version == LEGACY_VERSION:
        raise LegacyLayoutError(f"slab file of layout version {LEGACY_VERSION} (this version: {FORMAT_VERSION})")
    if magic != _SUPER_MAGIC or version != FORMAT_VERSION:
        raise SuperblockError("not a slab file of this format")
    geometry = Geometry(page_bytes, slot_bytes, ways, sets, files)
    if raw[:SUPERBLOCK_SIZE] != encode_superblock(geometry, index, bytes(tag)):
        raise SuperblockError("inconsistent superblock")
    return geometry, index, bytes(tag)


def _slot_alignment(slot_bytes: int) -> int:
    """The largest power of two (at most 2 MiB) that divides ``slot_bytes``: every slot starts on a
    multiple of it, so the page cache can hold a slot in large folios (512 KiB pages: one folio)."""
    return min(SLOT_ALIGN_MAX, slot_bytes & -slot_bytes)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
