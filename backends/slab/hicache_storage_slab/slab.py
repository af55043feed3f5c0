"""One key space's slab: its preallocated files and the lock-free slot protocol.

Writing a page (no lock is shared between processes; see ``docs/backends/slab.md``):

1. Pick the key's set (with two choices: of its two candidate sets, the one holding a copy of the
   key, else the one whose victim is least recent). Read its headers; pick the slot: a committed
   copy of the same key with the same checksum is rewritten in place (same bytes over same bytes),
   else the victim is an empty or damaged slot, else the slot with the oldest ``seq`` that holds
   another key.
2. Claim a victim: its header becomes ``WRITING`` with this write's digest, ``seq`` and writer id,
   so the key it held stops being found before its bytes are overwritten.
3. ``pwritev`` the page's segments into the slot in one call, straight from host memory, then hash them.
4. Commit: re-read the header; if the claim is still ours, write the ``COMMITTED`` header (digest,
   length, ``seq``, checksum). Only now can a reader or ``exists`` find the page. A claim taken
   over by another writer is a failed write.
5. Older committed copies of the key in the set are blanked.

A reader reads the headers of the key's candidate sets, takes the committed copy of its key with the
highest ``seq``, ``preadv``s it into host memory and checks length and checksum: any mismatch (a torn write, a slot
rewritten under the reader, corrupted bytes) is a miss, never data. Threads of one process take a
per-set lock around steps 1-2 only, so they never pick the same victim.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import xxhash

from hicache_storage.plugin.page_format import PageRecordError, RecordCodec

from .header_area import blank_headers, committed_entries
from .layout import (
    COMMITTED,
    DAMAGED,
    ENTRY_SIZE,
    SUPERBLOCK_SIZE,
    WRITING,
    Entry,
    Geometry,
    checksum_seed,
    decode_entry,
    decode_set,
    digest_at,
    encode_entry,
    find_committed,
    key_digest,
    space_tag,
)
from .page_io import DirectRefused, direct_aligned, page_checksum, read_hashed, write_hashed
from .set_scan import scan_set
from .slab_files import Bump, SlabFile, attach_direct, open_files

__all__ = ["CLAIM_WAIT_S", "Slab", "WritePlan"]

_BLANK = bytes(ENTRY_SIZE)
_DAMAGED_ENTRY_STATE = DAMAGED
_STRIPES = 64
#: Longest wait (seconds) for a slot when every slot of a set is being written by this process.
CLAIM_WAIT_S = 1.0
_NO_WAYS: frozenset[int] = frozenset()
_Hasher = xxhash.xxh3_64


@dataclass(slots=True)
class WritePlan:
    """A page whose bytes are in its slot, waiting for its header to be committed."""

    file: SlabFile
    file_index: int
    stripe: int
    header_offset: int
    digest: bytes
    seen: bytes  # the header the slot must still hold at commit time
    in_place: bool
    commit: bytes
    # (header offset, seq, checksum) of older copies of the key, blanked once this copy commits
    stale: list[tuple[int, int, int]] = field(default_factory=list)
    elsewhere: list[tuple[int, int]] = field(default_factory=list)  # other sets seen holding a copy
    finished: bool = False


class Slab:
    """The slab of one key space: files, geometry, and page I/O through the slot protocol."""

    def __init__(
        self,
        root: str,
        prefix: str,
        geometry: Geometry,
        *,
        direct_io: bool,
        durable: bool,
        bump: Bump,
        zero_fill: bool = False,
        codec: RecordCodec | None = None,
        touch_after_s: float | None = None,
        choices: int = 1,
    ) -> None:
        self.root = root
        self._choices = choices
        #: A read hit on a page last made recent this many nanoseconds ago or more makes it recent again.
        self._touch_ns = None if touch_after_s is None else int(touch_after_s * 1e9)
        self._codec = codec if codec is not None and codec.authenticated else None
        self.prefix = prefix
        self.geometry = geometry
        self._bump = bump
        self._ways = geometry.ways
        self._set_bytes = geometry.ways * ENTRY_SIZE
        self._sets = geometry.sets
        self._file_count = geometry.files
        self._data_offset = geometry.data_offset
        self._slot_bytes = geometry.slot_bytes
        self._page_bytes = geometry.page_bytes
        self._tag = space_tag(prefix)
        # Per stripe of sets: a condition (its lock guards slot choice) and the header offsets of slots
        # this process has claimed and not committed yet, which no other thread of it may take.
        self._stripes = [threading.Condition() for _ in range(_STRIPES)]
        self._pending: list[set[tuple[int, int]]] = [set() for _ in range(_STRIPES)]
        self._waiting = [0] * _STRIPES  # threads waiting on each stripe's condition (guarded by it)
        self._writer_base = secrets.randbits(32) << 32
        self._writes = itertools.count(1)
        self.files: list[SlabFile] = open_files(
            root, prefix, geometry, self._tag, durable=durable, zero_fill=zero_fill, bump=bump
        )
        self.direct_io = False
        if direct_io:
            self.direct_io = attach_direct(self.files, bump)

    # ------------------------------------------------------------ helpers
    def _locate(self, digest: bytes) -> tuple[int, int]:
        """(file index, local set) of a key digest (:meth:`Geometry.locate`, inlined)."""
        number = int.from_bytes(digest[:8], "little") % self._sets
        return number % self._file_count, number // self._file_count

    def _candidates(self, digest: bytes) -> list[tuple[int, int]]:
        """(file index, local set) of each set ``digest`` may live in: the first by the digest's first
        8 bytes, with two choices also one by its last 8 bytes (when that is another set)."""
        first = self._locate(digest)
        if self._choices == 1:
            return [first]
        number = int.from_bytes(digest[8:16], "little") % self._sets
        second = (number % self._file_count, number // self._file_count)
        return [first] if second == first else [first, second]

    def _set_offset(self, local_set: int) -> int:
        return SUPERBLOCK_SIZE + local_set * self._set_bytes

    def _find(self, digest: bytes) -> tuple[tuple[int, int, int, Entry] | None, list[bytes]]:
        """(file index, local set, way, header) of the newest committed copy of ``digest`` in the first of
        its candidate sets that holds one, and the raw headers of the sets read.

        One writer never leaves copies of a key in both sets (a write goes to the set holding its
        copy); two racing writers may, and a read then finds the first set's, a complete page of
        that key either way.
        """
        raws: list[bytes] = []
        for index, local_set in self._candidates(digest):
            raw = self._read_set(self.files[index], self._set_offset(local_set))
            raws.append(raw)
            found = find_committed(raw, digest)
            if found is not None:
                return (index, local_set, found[0], found[1]), raws
        return None, raws

    def _choose(self, digest: bytes) -> tuple[tuple[int, int], list[tuple[int, int]]]:
        """The candidate set a write of ``digest`` goes to (one holding a copy of it, else the one whose
        victim is least recent, a blank slot first), and the other candidates seen holding a copy."""
        candidates = self._candidates(digest)
        if len(candidates) == 1:
            return candidates[0], []
        best: tuple[int, tuple[int, int]] | None = None
        holding: list[tuple[int, int]] = []
        for where in candidates:
            scan = scan_set(self._read_set(self.files[where[0]], self._set_offset(where[1])), self._ways)
            if scan.copies(digest):
                holding.append(where)
            elif not holding:
                age = scan.victim_age(digest)
                if best is None or age < best[0]:
                    best = (age, where)
        if holding:
            return holding[0], holding[1:]
        assert best is not None
        return best[1], []

    def _slot(self, local_set: int, way: int) -> int:
        return self._data_offset + (local_set * self._ways + way) * self._slot_bytes

    def set_of(self, key: str) -> tuple[int, int]:
        """(file index, local set) of the first set ``key`` may live in."""
        return self._locate(key_digest(key))

    def sets_of(self, key: str) -> list[tuple[int, int]]:
        """(file index, local set) of every set ``key`` may live in (two with ``choices: 2``)."""
        return self._candidates(key_digest(key))

    def _read_set(self, file: SlabFile, offset: int) -> bytes:
        return file.headers.read(offset, self._set_bytes)

    def _writer_id(self) -> int:
        return self._writer_base | (next(self._writes) & 0xFFFFFFFF)

    # ------------------------------------------------------------ write
    def stage(self, key: str, page: Sequence[memoryview]) -> WritePlan | None:
        """Steps 1-3 of a write: pick and claim a slot, write the page's bytes. ``None``: wrong page size.

        The plan must reach :meth:`commit` or :meth:`finish`, which release the slot to this
        process's other threads.
        """
        length = sum([segment.nbytes for segment in page])
        if length != self._page_bytes:
            return None
        ways = self._ways
        digest = key_digest(key)
        checksum: int | None = None  # hashed right after the bytes are written, unless needed first
        (index, local_set), elsewhere = self._choose(digest)
        file, set_offset = self.files[index], SUPERBLOCK_SIZE + local_set * self._set_bytes
        stripe = (index * 7919 + local_set) % _STRIPES
        pending = self._pending[stripe]
        condition = self._stripes[stripe]
        with condition:
            deadline: float | None = None
            while True:
                raw = self._read_set(file, set_offset)
                scan = scan_set(raw, ways)
                busy = _busy_ways(pending, index, set_offset, ways) if pending else _NO_WAYS
                copies = scan.copies(digest)
                same: list[tuple[int, Entry]] = []
                if copies:  # a rewrite: the same bytes can go in place, so hash them now
                    if checksum is None:
                        checksum = page_checksum(page, digest)
                    same = [
                        (w, e) for w, e in copies if e.checksum == checksum and e.length == length and w not in busy
                    ]
                way = max(same, key=lambda item: item[1].seq)[0] if same else scan.victim(digest, busy)
                if way is not None:
                    break
                # Every slot of the set is being written by this process: wait for one to commit.
                now = time.monotonic()
                deadline = now + CLAIM_WAIT_S if deadline is None else deadline
                if now >= deadline:
                    way = scan.victim(digest, _NO_WAYS)
                    assert way is not None
                    break
                self._waiting[stripe] += 1
                try:
                    condition.wait(deadline - now)
                finally:
                    self._waiting[stripe] -= 1
            seq = max(time.time_ns(), scan.max_seq() + 1)
            header_offset = set_offset + way * ENTRY_SIZE
            if same:
                seen = raw[way * ENTRY_SIZE : (way + 1) * ENTRY_SIZE]
            else:
                if scan.holds_other(way, digest):
                    self._bump("evictions")
                seen = encode_entry(WRITING, length, seq, digest, checksum=0, writer=self._writer_id())
                file.headers.write(header_offset, seen)
            pending.add((index, header_offset))
        plan = WritePlan(
            file,
            index,
            stripe,
            header_offset,
            digest,
            seen,
            bool(same),
            b"",
            [(set_offset + w * ENTRY_SIZE, e.seq, e.checksum) for w, e in copies if w != way],
            elsewhere=elsewhere,
        )
        try:
            hashed = self._write_payload(file, self._slot(local_set, way), page, length, digest)
            if checksum is None:
                checksum = hashed
        except BaseException:
            self.finish(plan)
            raise
        auth = b"" if self._codec is None else self._codec.header(key, page)
        plan.commit = encode_entry(
            COMMITTED, length, seq, digest, checksum=checksum, writer=self._writer_id(), key=key.encode(), auth=auth
        )
        return plan

    def finish(self, plan: WritePlan) -> None:
        """Release the slot of ``plan`` to this process's other writers (idempotent)."""
        if plan.finished:
            return
        plan.finished = True
        condition = self._stripes[plan.stripe]
        with condition:
            self._pending[plan.stripe].discard((plan.file_index, plan.header_offset))
            if self._waiting[plan.stripe]:
                condition.notify_all()

    def commit(self, plan: WritePlan) -> bool:
        """Steps 4-5: publish the staged page unless another writer took its slot meanwhile."""
        try:
            return self._commit(plan)
        finally:
            self.finish(plan)

    def _commit(self, plan: WritePlan) -> bool:
        headers = plan.file.headers
        current = headers.read(plan.header_offset, ENTRY_SIZE)
        if plan.in_place:
            now, before = decode_entry(current), decode_entry(plan.seen)
            kept = now.state == COMMITTED and (now.digest, now.checksum, now.length) == (
                before.digest,
                before.checksum,
                before.length,
            )
        else:
            kept = current == plan.seen
        if not kept:
            self._bump("write_races")
            return False
        headers.write(plan.header_offset, plan.commit)
        for offset, seq, checksum in plan.stale:
            old = decode_entry(headers.read(offset, ENTRY_SIZE))
            # the copy seen at staging: same seq, or the same bytes made recent by a read since
            if old.state == COMMITTED and old.digest == plan.digest and (old.seq == seq or old.checksum == checksum):
                headers.write(offset, _BLANK)
        if plan.elsewhere:
            self._blank_elsewhere(plan)
        return True

    def _blank_elsewhere(self, plan: WritePlan) -> None:
        """Blank the copies of the key in its other candidate set that this commit supersedes: older
        ones, and any with the same bytes (a newer copy with other bytes, another writer's, stays)."""
        ours = decode_entry(plan.commit)
        for index, local_set in plan.elsewhere:
            file, set_offset = self.files[index], self._set_offset(local_set)
            raw = self._read_set(file, set_offset)
            found = find_committed(raw, plan.digest)
            while found is not None and (found[1].seq < ours.seq or found[1].checksum == ours.checksum):
                offset = set_offset + found[0] * ENTRY_SIZE
                file.headers.write(offset, _BLANK)
                raw = raw[: found[0] * ENTRY_SIZE] + _BLANK + raw[(found[0] + 1) * ENTRY_SIZE :]
                found = find_committed(raw, plan.digest)

    def _write_payload(
        self, file: SlabFile, offset: int, page: Sequence[memoryview], length: int, digest: bytes
    ) -> int:
        """Write ``page`` at ``offset`` and return its checksum (see :func:`write_hashed`)."""
        hasher = _Hasher(seed=checksum_seed(digest))
        if file.direct_fd is not None and direct_aligned(page):
            try:
                write_hashed(file.direct_fd, page, offset, length, hasher)
                return int(hasher.intdigest())
            except DirectRefused:
                self._bump("direct_io_fallbacks")
                hasher.reset()
        write_hashed(file.fd, page, offset, length, hasher)
        return int(hasher.intdigest())

    def sync(self) -> None:
        """``fdatasync`` every file of the slab."""
        for file in self.files:
            os.fdatasync(file.fd)

    # ------------------------------------------------------------ read
    def read(self, key: str, page: Sequence[memoryview]) -> bool:
        """Fill ``page`` with the stored bytes of ``key``; ``False`` for a miss or a page failing its checks."""
        digest = key_digest(key)
        found, raws = self._find(digest)
        if found is None:
            if any(_DAMAGED_ENTRY_STATE in [e.state for e in decode_set(raw, self._ways)] for raw in raws):
                self._bump("integrity_failures")  # a damaged header in the key's sets may have been its own
            return False
        index, local_set, way, entry = found
        file = self.files[index]
        raw = raws[self._candidates(digest).index((index, local_set))]
        length = sum([segment.nbytes for segment in page])
        if entry.length != length:
            self._bump("integrity_failures")
            return False
        checksum = self._read_payload(file, self._slot(local_set, way), page, length, digest)
        if checksum != entry.checksum or (self._codec is not None and not self._authentic(entry, key, page)):
            self._bump("integrity_failures")
            return False
        if self._touch_ns is not None and time.time_ns() - entry.seq >= self._touch_ns:
            self._touch(file, SUPERBLOCK_SIZE + local_set * self._set_bytes + way * ENTRY_SIZE, raw, way, entry)
        return True

    def _touch(self, file: SlabFile, header_offset: int, raw: bytes, way: int, entry: Entry) -> None:
        """Make a page just read recent again (its ``seq`` becomes now), so replacement follows reads.

        Stored only while the header still holds what the read saw: a header claimed, rewritten or
        blanked meanwhile is left alone. (Between that check and the store another process may
        change it; the store then brings back this same page of this same key, still checked on read.)
        """
        seen = raw[way * ENTRY_SIZE : (way + 1) * ENTRY_SIZE]
        fresh = encode_entry(
            COMMITTED,
            entry.length,
            max(time.time_ns(), entry.seq + 1),
            entry.digest,
            checksum=entry.checksum,
            writer=entry.writer,
            key=entry.key,
            auth=entry.auth,
        )
        if file.headers.read(header_offset, ENTRY_SIZE) == seen:
            file.headers.write(header_offset, fresh)
            self._bump("read_touches")

    def _authentic(self, entry: Entry, key: str, page: Sequence[memoryview]) -> bool:
        """Whether the page carries a valid tag of the integrity secret (a page written without it does not)."""
        assert self._codec is not None
        try:
            parsed = self._codec.check_header(entry.auth, key, entry.length)
        except PageRecordError:
            return False
        return self._codec.tag_ok(parsed, key, page)

    def _read_payload(
        self, file: SlabFile, offset: int, page: Sequence[memoryview], length: int, digest: bytes
    ) -> int | None:
        """Read ``page`` from ``offset``; the checksum of the bytes read, ``None`` for a short read."""
        hasher = _Hasher(seed=checksum_seed(digest))
        if file.direct_fd is not None and direct_aligned(page):
            try:
                done = read_hashed(file.direct_fd, page, offset, length, hasher)
                return int(hasher.intdigest()) if done else None
            except DirectRefused:
                self._bump("direct_io_fallbacks")
                hasher.reset()
        done = read_hashed(file.fd, page, offset, length, hasher)
        return int(hasher.intdigest()) if done else None

    def exists(self, key: str) -> bool:
        """Whether a committed copy of ``key`` is in its set (its bytes are checked by :meth:`read`)."""
        digest = key_digest(key)
        return any(
            find_committed(self._read_set(self.files[index], self._set_offset(local_set)), digest) is not None
            for index, local_set in self._candidates(digest)
        )

    def locate(self, key: str) -> tuple[SlabFile, int, int] | None:
        """(file, header offset, slot offset) of the copy of ``key`` a read would use, or ``None``."""
        found, _raws = self._find(key_digest(key))
        if found is None:
            return None
        index, local_set, way, _entry = found
        return self.files[index], self._set_offset(local_set) + way * ENTRY_SIZE, self._slot(local_set, way)

    # ------------------------------------------------------------ listing
    def committed(self) -> list[Entry]:
        """Every committed header of the slab (file by file; a key may appear twice while a rewrite settles)."""
        return [entry for file in self.files for entry in committed_entries(file.fd, self.geometry)]

    # ------------------------------------------------------------ removal
    def delete(self, key: str) -> None:
        """Blank every header of ``key`` in its sets (committed or being written)."""
        digest = key_digest(key)
        for index, local_set in self._candidates(digest):
            file, set_offset = self.files[index], self._set_offset(local_set)
            raw = self._read_set(file, set_offset)
            for way in range(self.geometry.ways):
                if digest_at(raw, way) != digest:
                    continue
                entry = decode_entry(raw, way * ENTRY_SIZE)
                if entry.state in (COMMITTED, WRITING) and entry.digest == digest:
                    file.headers.write(set_offset + way * ENTRY_SIZE, _BLANK)

    def clear(self) -> None:
        """Blank every slot header of every file."""
        for file in self.files:
            blank_headers(file.fd, self.geometry)

    def close(self) -> None:
        for file in self.files:
            file.close()


def _busy_ways(pending: set[tuple[int, int]], index: int, set_offset: int, ways: int) -> set[int]:
    """Ways of the set at ``set_offset`` of file ``index`` that this process has claimed and not committed."""
    end = set_offset + ways * ENTRY_SIZE
    return {(offset - set_offset) // ENTRY_SIZE for i, offset in pending if i == index and set_offset <= offset < end}
