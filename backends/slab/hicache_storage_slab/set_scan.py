"""What a writer needs from one set's raw slot headers, read in one vectorised pass.

A write decides among every slot of its set: a committed copy of its key to rewrite in place, else
an empty or unreadable slot, else the least recent slot holding another key. Decoding and checking
each header in Python costs about 1 µs per slot, which dominates the write of a small page at 64
ways; :class:`SetScan` reads the fields it needs (magic, state, ``seq``, key digest) for all slots at
once with NumPy and fully decodes (and checks) only the headers naming the writer's key. For a
few ways, decoding every header in Python is cheaper than NumPy's fixed cost per call (about 16 µs
for a scan): :func:`scan_set` picks :class:`DecodedSet` up to :data:`DECODE_WAYS` ways.
"""

from __future__ import annotations

import numpy as np

from .layout import COMMITTED, DAMAGED, EMPTY, ENTRY_SIZE, Entry, decode_entry, decode_set

__all__ = ["DECODE_WAYS", "DecodedSet", "SetScan", "scan_set"]

#: Up to this many ways a set is decoded header by header (:class:`DecodedSet`), above it scanned with NumPy.
DECODE_WAYS = 16

_MAGIC = int.from_bytes(b"HSLT", "little")
_FIELDS = np.dtype(
    {
        "names": ["magic", "state", "seq", "d0", "d1"],
        "formats": ["<u4", "u1", "<u8", "<u8", "<u8"],
        "offsets": [0, 5, 16, 24, 32],
        "itemsize": ENTRY_SIZE,
    }
)


class SetScan:
    """The headers of one set (``raw``: ``ways`` consecutive headers), scanned once."""

    __slots__ = ("_digest_hits", "_fields", "_raw", "ways")

    def __init__(self, raw: bytes, ways: int) -> None:
        self._raw = raw
        self.ways = ways
        self._fields = np.frombuffer(raw, dtype=_FIELDS, count=ways)

    def copies(self, digest: bytes) -> list[tuple[int, Entry]]:
        """(way, header) of every valid committed header of ``digest``."""
        found: list[tuple[int, Entry]] = []
        low, high = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")
        fields = self._fields
        for way in np.flatnonzero((fields["d0"] == low) & (fields["d1"] == high)).tolist():
            entry = decode_entry(self._raw, way * ENTRY_SIZE)
            if entry.state == COMMITTED and entry.digest == digest:
                found.append((way, entry))
        return found

    def max_seq(self) -> int:
        """The highest ``seq`` of a header that looks valid (0 for a blank set)."""
        fields = self._fields
        seqs = fields["seq"][fields["magic"] == _MAGIC]
        return int(seqs.max()) if seqs.size else 0

    def holds_other(self, way: int, digest: bytes) -> bool:
        """Whether ``way`` holds a committed page of another key (writing there evicts it)."""
        entry = decode_entry(self._raw, way * ENTRY_SIZE)
        return entry.state == COMMITTED and entry.digest != digest

    def victim_age(self, digest: bytes) -> int:
        """How recent the slot a write would take is: 0 with a blank or unreadable slot, else the
        lowest ``seq`` of the set (lower is better; ``digest`` is for the interface of :class:`DecodedSet`)."""
        fields = self._fields
        if (fields["magic"] != _MAGIC).any():
            return 0
        return int(fields["seq"].min())

    def victim(self, digest: bytes, busy: set[int] | frozenset[int]) -> int | None:
        """A blank or unreadable slot first, else the least recent slot holding another key, else the
        least recent slot; slots in ``busy`` are never chosen (``None`` when all others are)."""
        fields = self._fields
        free = np.ones(self.ways, dtype=bool)
        if busy:
            free[list(busy)] = False
        blank = np.flatnonzero(free & (fields["magic"] != _MAGIC))
        if blank.size:
            return int(blank[0])
        low, high = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")
        other = free & ~((fields["d0"] == low) & (fields["d1"] == high))
        pool = np.flatnonzero(other if other.any() else free)
        if not pool.size:
            return None
        return int(pool[int(np.argmin(fields["seq"][pool]))])


class DecodedSet:
    """What :class:`SetScan` answers, from every header of the set decoded and checked in Python."""

    __slots__ = ("_entries",)

    def __init__(self, raw: bytes, ways: int) -> None:
        self._entries = decode_set(raw, ways)

    def copies(self, digest: bytes) -> list[tuple[int, Entry]]:
        return [(w, e) for w, e in enumerate(self._entries) if e.state == COMMITTED and e.digest == digest]

    def max_seq(self) -> int:
        return max([e.seq for e in self._entries])

    def holds_other(self, way: int, digest: bytes) -> bool:
        entry = self._entries[way]
        return entry.state == COMMITTED and entry.digest != digest

    def victim_age(self, digest: bytes) -> int:
        way = self.victim(digest, frozenset())
        assert way is not None
        entry = self._entries[way]
        return 0 if entry.state in (EMPTY, DAMAGED) else entry.seq

    def victim(self, digest: bytes, busy: set[int] | frozenset[int]) -> int | None:
        other: int | None = None
        other_seq = 0
        oldest: int | None = None
        oldest_seq = 0
        for way, entry in enumerate(self._entries):
            if way in busy:
                continue
            if entry.state in (EMPTY, DAMAGED):
                return way
            seq = entry.seq
            if oldest is None or seq < oldest_seq:
                oldest, oldest_seq = way, seq
            if entry.digest != digest and (other is None or seq < other_seq):
                other, other_seq = way, seq
        return other if other is not None else oldest


def scan_set(raw: bytes, ways: int) -> SetScan | DecodedSet:
    """The cheaper reader of a set of ``ways`` headers."""
    return DecodedSet(raw, ways) if ways <= DECODE_WAYS else SetScan(raw, ways)
