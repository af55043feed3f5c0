"""The slab index: one LMDB environment per store, shared by every process that opens the store.

LMDB gives the index what a cache shared by the processes of one host needs: readers never wait
(each read sees one committed state), one writer at a time across processes (its lock is released
when a writer dies), and a committed state that survives ``kill -9`` of any process. Writes hold the
lock for bookkeeping only, never during page I/O: a write takes its slots in one transaction
(:meth:`SlabIndex.stage`), moves the bytes, and publishes the pages in a second
(:meth:`SlabIndex.commit`).

The environment is opened without syncing at commit; a durable store (``fsync``) flushes it
explicitly after each batch. Without ``fsync`` the kernel writes the index back like the data, so a
power loss can leave it damaged: a store whose host restarted without a clean close starts with an
empty index (see :mod:`~hicache_storage_slab.store_files`).
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import lmdb

from .allocator import Databases, WriteTxn
from .geometry import StoreGeometry
from .records import PINNED, Claim, Entry, decode_entry, encode_entry, pack, recency_seq, u32, with_seq

__all__ = ["MAX_READERS", "SlabIndex", "Staged", "Touch", "Written", "open_index"]

#: Reader slots of the index (processes x threads reading at once).
MAX_READERS = 510
_DATABASES = Databases._fields


@dataclass(slots=True)
class Staged:
    """A page whose slots are claimed: the bytes go there, then :meth:`SlabIndex.commit` publishes it."""

    digest: bytes
    refs: list[int]
    claim: Claim


@dataclass(slots=True)
class Written:
    """What :meth:`SlabIndex.commit` publishes for a staged page (``entry`` ``None``: the write failed)."""

    staged: Staged
    entry: Entry | None


@dataclass(slots=True)
class Touch:
    """A page read at ``seen_seq`` that becomes recent (``seq``)."""

    digest: bytes
    seen_seq: int
    seq: int


@dataclass
class Outcome:
    """What a write transaction did besides its results (for the backend's counters)."""

    evicted: int = 0
    taken_back: int = 0
    results: list[bool] = field(default_factory=list)


_OPEN: dict[tuple[int, int], tuple[SlabIndex, int]] = {}
_OPEN_LOCK = threading.Lock()


def open_index(path: str, geometry: StoreGeometry) -> SlabIndex:
    """The index at ``path``, opened once per process (LMDB allows one environment per file and
    process) and shared by every backend instance of the process that opens the store; each call
    must be matched by one :meth:`SlabIndex.close`."""
    with _OPEN_LOCK:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            stat = os.fstat(fd)
        finally:
            os.close(fd)
        identity = (stat.st_dev, stat.st_ino)
        found = _OPEN.get(identity)
        if found is not None and found[0].geometry == geometry:
            _OPEN[identity] = (found[0], found[1] + 1)
            return found[0]
        index = SlabIndex(path, geometry, identity)
        _OPEN[identity] = (index, 1)
        return index


class SlabIndex:
    """Entries, slots and replacement order of one store (thread-safe; see :func:`open_index`)."""

    def __init__(self, path: str, geometry: StoreGeometry, identity: tuple[int, int]) -> None:
        self.path = path
        self.geometry = geometry
        self._identity = identity
        self.env = lmdb.open(
            path,
            subdir=False,
            map_size=geometry.index_bytes,
            max_dbs=len(_DATABASES),
            max_readers=MAX_READERS,
            writemap=True,
            sync=False,
            metasync=False,
            readahead=False,
            meminit=False,
            lock=True,
        )
        self.env.reader_check()  # reader slots of processes that died
        self.db = Databases(*(self.env.open_db(name.encode()) for name in _DATABASES))
        self._writer_base = secrets.randbits(32) << 32
        self._writes = itertools.count(1)
        #: Write transactions that ran out of index room (each followed by an eviction or a reset).
        self.room_faults = 0

    def close(self) -> None:
        """Release this user's hold; the environment closes with the last one."""
        with _OPEN_LOCK:
            found = _OPEN.get(self._identity)
            if found is not None and found[0] is self and found[1] > 1:
                _OPEN[self._identity] = (self, found[1] - 1)
                return
            if found is not None and found[0] is self:
                del _OPEN[self._identity]
        self.env.close()

    def sync(self) -> None:
        """Flush every committed transaction to the disk."""
        self.env.sync(True)

    def writer_id(self) -> int:
        """A number no other write of any process uses (random per instance, then a counter)."""
        return self._writer_base | (next(self._writes) & 0xFFFFFFFF)

    # ------------------------------------------------------------ set-up
    def store_id(self) -> bytes | None:
        with self.env.begin(db=self.db.meta) as txn:
            raw = txn.get(b"store")
            return bytes(raw) if raw is not None else None

    def reset(self, store_id: bytes) -> None:
        """Empty the index: no page, every region spare, owned by the store ``store_id``."""
        with self.env.begin(write=True) as txn:
            for db in self.db:
                txn.drop(db, delete=False)
            txn.put(b"store", store_id, db=self.db.meta)
            spare = self.db.spare
            for region in range(self.geometry.regions):
                txn.put(u32(region), b"", db=spare, append=True)

    # ------------------------------------------------------------ reads
    def lookup(self, digests: Sequence[bytes]) -> list[Entry | None]:
        """The committed entry of each digest (``None``: not stored)."""
        return [decode_entry(raw) if raw is not None else None for raw in self.lookup_raw(digests)]

    def lookup_raw(self, digests: Sequence[bytes]) -> list[bytes | None]:
        """The encoded committed entry of each digest (``None``: not stored); equal bytes, equal entries."""
        pages = self.db.pages
        with self.env.begin(db=pages) as txn:
            return [txn.get(digest) for digest in digests]

    def contains(self, digests: Sequence[bytes]) -> list[bool]:
        with self.env.begin(db=self.db.pages) as txn:
            return [txn.get(digest) is not None for digest in digests]

    def entries(self, after: bytes | None) -> Iterable[tuple[bytes, Entry]]:
        """(digest, entry) of every page, in digest order, after the digest ``after``."""
        with self.env.begin(db=self.db.pages) as txn:
            cursor = txn.cursor()
            found = cursor.set_range(after + b"\x00") if after is not None else cursor.first()
            if not found:
                return
            for digest, raw in cursor.iternext():
                yield bytes(digest), decode_entry(raw)

    def page_count(self) -> int:
        with self.env.begin() as txn:
            return int(txn.stat(self.db.pages)["entries"])

    def claim_count(self) -> int:
        with self.env.begin() as txn:
            return int(txn.stat(self.db.claims)["entries"])

    def group_usage(self) -> dict[str, int]:
        """Bytes of data area held by each namespace's pages."""
        usage: dict[str, int] = {}
        with self.env.begin(db=self.db.groups) as txn:
            cursor = txn.cursor()
            if cursor.set_range(b"n"):
                for key, value in cursor.iternext():
                    if key[:1] != b"n":
                        break
                    held = txn.get(b"i" + bytes(value))
                    usage[bytes(key[1:]).decode(errors="replace")] = int.from_bytes(held or b"", "big")
        return usage

    # ------------------------------------------------------------ writes
    def _write(self, work: Callable[[WriteTxn], None]) -> Outcome:
        """Run ``work`` in one write transaction. When the index runs out of room (the pages a
        transaction copies did not fit), the least recent eighth of its pages is evicted and ``work``
        runs once more; when even that does not fit, the index is emptied."""
        try:
            return self._attempt(work)
        except lmdb.MapFullError:
            self.room_faults += 1
        try:
            self._attempt(lambda txn: _evict_oldest(txn, max(1, self.geometry.max_pages // 8)))
        except lmdb.MapFullError:
            store_id = self.store_id()
            self.reset(store_id if store_id is not None else secrets.token_bytes(16))
            self.room_faults += 1
        return self._attempt(work)

    def _attempt(self, work: Callable[[WriteTxn], None]) -> Outcome:
        outcome = Outcome()
        with self.env.begin(write=True) as txn:
            writer = WriteTxn(txn, self.db, self.geometry, time.time_ns())
            work(writer)
            writer.flush()
            outcome.evicted = writer.evicted
        return outcome

    def stage(
        self, requests: Sequence[tuple[bytes, int, int]], namespace: str, *, quota: int | None, sweep: bool
    ) -> tuple[list[Staged | None], Outcome]:
        """Claim slots for pages: each request is (digest, chunk size, chunks). ``None`` where no room
        could be made. ``sweep``: first take back the slots of writers that died."""
        staged: list[Staged | None] = []
        taken_back = 0

        def work(txn: WriteTxn) -> None:
            nonlocal taken_back
            staged.clear()  # a transaction that ran out of room runs again from the start
            if sweep:
                taken_back = txn.sweep_claims()
            group = txn.group_id(namespace)
            limit = self.geometry.max_pages
            for digest, chunk, chunks in requests:
                _evict_over_limits(txn, group, chunk, chunk * chunks, quota=quota, limit=limit)
                refs = txn.take(chunk, chunks)
                if refs is None:
                    staged.append(None)
                    continue
                claim = Claim(digest, self.writer_id(), txn.now)
                txn.claim(refs, claim)
                staged.append(Staged(digest, refs, claim))

        outcome = self._write(work)
        outcome.taken_back = taken_back
        return staged, outcome

    def commit(self, written: Sequence[Written], namespace: str, touches: Sequence[Touch] = ()) -> Outcome:
        """Publish the pages whose bytes are in place; give back the slots of failed writes. A page
        whose claim another process took back (its writer was taken for dead) is not published.
        ``touches``: pages (earlier in the chains) that become recent too."""
        results: list[bool] = []

        def work(txn: WriteTxn) -> None:
            results.clear()  # a transaction that ran out of room runs again from the start
            db, raw_txn = self.db, txn.txn
            group = txn.group_id(namespace)
            for item in written:
                staged, entry = item.staged, item.entry
                ours = [raw_txn.get(_ref_key(ref), db=db.claims) == pack(staged.claim) for ref in staged.refs]
                for ref, mine in zip(staged.refs, ours, strict=True):
                    if mine:
                        raw_txn.delete(_ref_key(ref), db=db.claims)
                if entry is None or not all(ours):
                    for ref, mine in zip(staged.refs, ours, strict=True):
                        if mine:
                            txn.give_back(ref, txn.region(ref >> 32).chunk_bytes)
                    results.append(False)
                    continue
                entry = entry._replace(group=group)
                old = raw_txn.get(staged.digest, db=db.pages)
                if old is not None:
                    txn.remove(staged.digest, decode_entry(old))
                raw_txn.put(staged.digest, encode_entry(entry), db=db.pages)
                raw_txn.put(entry.recency_key(staged.digest), b"", db=db.recency)
                for ref in entry.refs:
                    raw_txn.put(_ref_key(ref), staged.digest, db=db.slots)
                txn.charge(group, entry.stored_bytes)
                results.append(True)
            _apply_touches(txn, touches)

        outcome = self._write(work)
        outcome.results = results
        return outcome

    def drop_own_claims(self) -> int:
        """Give back the slots this instance claimed and did not commit (when its last user closes it);
        how many. Nothing while other users of this process hold it: their writes share its claims."""
        with _OPEN_LOCK:
            found = _OPEN.get(self._identity)
            if found is not None and found[0] is self and found[1] > 1:
                return 0
        base = self._writer_base >> 32
        dropped = 0

        def work(txn: WriteTxn) -> None:
            nonlocal dropped
            dropped = txn.sweep_claims(lambda claim: claim.writer >> 32 == base)

        self._write(work)
        return dropped

    def touch(self, touches: Sequence[Touch]) -> None:
        """Make pages recent again (each only if it is still the copy that was read)."""
        self._write(lambda txn: _apply_touches(txn, touches))

    def delete(self, digests: Sequence[bytes]) -> int:
        """Remove the pages of ``digests``; how many were stored."""
        removed = 0

        def work(txn: WriteTxn) -> None:
            nonlocal removed
            removed = 0
            for digest in digests:
                raw = txn.txn.get(digest, db=self.db.pages)
                if raw is not None:
                    txn.remove(digest, decode_entry(raw))
                    removed += 1

        self._write(work)
        return removed

    def clear(self, prefixes: Sequence[bytes]) -> int:
        """Remove every page whose storage key starts with one of ``prefixes``; how many."""
        wanted = tuple(prefixes)
        doomed = [digest for digest, entry in self.entries(None) if entry.key.startswith(wanted)]
        for begin in range(0, len(doomed), 4096):
            self.delete(doomed[begin : begin + 4096])
        return len(doomed)

    def set_pinned(self, digests: Sequence[bytes], pinned: bool) -> None:
        """Move pages to the pinned tier (or out of it)."""
        tier = PINNED if pinned else 0

        def work(txn: WriteTxn) -> None:
            for digest in digests:
                raw = txn.txn.get(digest, db=self.db.pages)
                if raw is None:
                    continue
                entry = decode_entry(raw)
                if entry.tier != tier:
                    txn.txn.delete(entry.recency_key(digest), db=self.db.recency)
                    entry = entry._replace(tier=tier)
                    txn.txn.put(digest, encode_entry(entry), db=self.db.pages)
                    txn.txn.put(entry.recency_key(digest), b"", db=self.db.recency)

        self._write(work)


def _ref_key(ref: int) -> bytes:
    return ref.to_bytes(8, "big")


def _evict_over_limits(txn: WriteTxn, group: int, chunk: int, incoming: int, *, quota: int | None, limit: int) -> None:
    """Evict before a page of ``incoming`` bytes is staged: the group's own least recent pages while it
    would exceed ``quota``, and the least recent pages of its size while the index holds ``limit`` pages."""
    if quota is not None:
        while txn.group_bytes(group) + incoming > quota:
            victim = txn.oldest(chunk, group=group)
            if victim is None:
                break
            txn.evict(victim)
    stat = txn.txn.stat
    while stat(txn.db.pages)["entries"] + stat(txn.db.claims)["entries"] >= limit:
        victim = txn.oldest(chunk)
        if victim is None:
            break
        txn.evict(victim)


def _evict_oldest(txn: WriteTxn, count: int) -> None:
    """Evict the ``count`` least recent pages of any size (pinned pages last)."""
    for _ in range(count):
        victims = [key for chunk in txn.chunk_sizes() if (key := txn.oldest(chunk)) is not None]
        if not victims:
            return
        txn.evict(min(victims, key=recency_seq))


def _apply_touches(txn: WriteTxn, touches: Iterable[Touch]) -> None:
    """Make pages recent (each only while it holds the ``seq`` it was read at), without decoding them."""
    db, raw_txn = txn.db, txn.txn
    for touch in touches:
        raw = raw_txn.get(touch.digest, db=db.pages)
        if raw is None:
            continue
        changed = with_seq(raw, touch.seen_seq, touch.seq)
        if changed is None:
            continue
        old, new, entry = changed
        raw_txn.delete(old + touch.digest, db=db.recency)
        raw_txn.put(touch.digest, entry, db=db.pages)
        raw_txn.put(new + touch.digest, b"", db=db.recency)
