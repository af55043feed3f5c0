"""Slots and replacement inside one write transaction of the slab index.

:class:`WriteTxn` hands out slots of a chunk size and takes them back. Where a slot comes from, in order:

1. a slot of that size given back earlier (``free``);
2. an unused slot of the region that size is filling;
3. a spare region, lent to that size;
4. room made by replacement: the least recent page of that size is evicted, unless another size's least
   recent page is more than :data:`STEAL_FACTOR` times older; then the region holding that page is taken
   from the other size (every page in it is evicted) and lent to this one. A size with no pages of its own
   always takes a region that way.

Pinned pages (tier :data:`~hicache_storage_slab.records.PINNED`) are replaced only when their size has
no other page. A region left without live slots goes back to the spare regions at once, so a key space
that is purged, cleared or replaced gives its space back to the others.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .geometry import StoreGeometry
from .records import (
    NO_REGION,
    PINNED,
    Claim,
    Entry,
    Region,
    SizeClass,
    decode_entry,
    pack,
    read_u16,
    read_u32,
    read_u64,
    recency_prefix,
    recency_seq,
    slot_ref,
    split_ref,
    u16,
    u32,
    u64,
    unpack,
)

__all__ = ["CLAIM_TTL_NS", "STEAL_FACTOR", "Databases", "WriteTxn"]

#: A region is taken from another chunk size when its least recent page is this many times older.
STEAL_FACTOR = 2.0
#: A claim older than this (nanoseconds) belongs to a writer that died: its slot is taken back.
CLAIM_TTL_NS = 60 * 10**9


class Databases(NamedTuple):
    """The named databases of the index (see :mod:`~hicache_storage_slab.records`)."""

    pages: Any
    recency: Any
    slots: Any
    claims: Any
    free: Any
    regions: Any
    spare: Any
    sizes: Any
    groups: Any
    meta: Any


class WriteTxn:
    """One LMDB write transaction: slot allocation, replacement and the bookkeeping they change.

    Region, size and group records are cached and written by :meth:`flush`, which must run before
    the transaction commits. ``evicted`` counts the pages replacement removed.
    """

    def __init__(self, txn: Any, dbs: Databases, geometry: StoreGeometry, now_ns: int) -> None:
        self.txn = txn
        self.db = dbs
        self.geometry = geometry
        self.now = now_ns
        self.evicted = 0
        self._regions: dict[int, Region] = {}
        self._sizes: dict[int, SizeClass] = {}
        self._group_delta: dict[int, int] = {}
        self._groups: list[int] | None = None
        self._cursors: dict[str, Any] = {}

    # ------------------------------------------------------------ cached records
    def _cursor(self, name: str) -> Any:
        cursor = self._cursors.get(name)
        if cursor is None:
            cursor = self._cursors[name] = self.txn.cursor(db=getattr(self.db, name))
        return cursor

    def region(self, region: int) -> Region:
        found = self._regions.get(region)
        if found is None:
            raw = self.txn.get(u32(region), db=self.db.regions)
            found = unpack(Region, raw) if raw is not None else Region(0, 0, 0)
            self._regions[region] = found
        return found

    def size_class(self, chunk: int) -> SizeClass:
        found = self._sizes.get(chunk)
        if found is None:
            raw = self.txn.get(u32(chunk), db=self.db.sizes)
            found = unpack(SizeClass, raw) if raw is not None else SizeClass(0, NO_REGION)
            self._sizes[chunk] = found
        return found

    def groups(self) -> list[int]:
        """The ids of every group (namespace) that has written to the store."""
        if self._groups is None:
            cursor = self._cursor("groups")
            found: list[int] = []
            if cursor.set_range(b"i"):
                for key in cursor.iternext(keys=True, values=False):
                    if key[:1] != b"i":
                        break
                    found.append(read_u16(key[1:3]))
            self._groups = found
        return self._groups

    def group_id(self, namespace: str) -> int:
        """The id of ``namespace``'s group, created on first use."""
        name = b"n" + namespace.encode()
        raw = self.txn.get(name, db=self.db.groups)
        if raw is not None:
            return read_u16(raw)
        ids = self.groups()
        group = max(ids, default=-1) + 1
        if group > 0xFFFF:
            raise OSError("the store has too many namespaces (65536)")
        self.txn.put(name, u16(group), db=self.db.groups)
        self.txn.put(b"i" + u16(group), u64(0), db=self.db.groups)
        ids.append(group)
        return group

    def group_bytes(self, group: int) -> int:
        raw = self.txn.get(b"i" + u16(group), db=self.db.groups)
        return (read_u64(raw) if raw is not None else 0) + self._group_delta.get(group, 0)

    def charge(self, group: int, amount: int) -> None:
        self._group_delta[group] = self._group_delta.get(group, 0) + amount

    def flush(self) -> None:
        """Write the cached region, size and group records."""
        txn, db = self.txn, self.db
        for region, record in self._regions.items():
            if record.chunk_bytes:
                txn.put(u32(region), pack(record), db=db.regions)
            else:
                txn.delete(u32(region), db=db.regions)
        for chunk, size in self._sizes.items():
            if size.regions:
                txn.put(u32(chunk), pack(size), db=db.sizes)
            else:
                txn.delete(u32(chunk), db=db.sizes)
        for group, delta in self._group_delta.items():
            if delta:
                key = b"i" + u16(group)
                raw = txn.get(key, db=db.groups)
                txn.put(key, u64(max(0, (read_u64(raw) if raw is not None else 0) + delta)), db=db.groups)
        self._regions.clear()
        self._sizes.clear()
        self._group_delta.clear()

    # ------------------------------------------------------------ handing out slots
    def take(self, chunk: int, count: int) -> list[int] | None:
        """``count`` slots of ``chunk`` bytes (``None``, and nothing taken, when no room can be made)."""
        refs: list[int] = []
        while len(refs) < count:
            ref = self._pop_free(chunk)
            if ref is None:
                ref = self._next_unused(chunk)
            if ref is None and self._lend_spare(chunk):
                ref = self._next_unused(chunk)
            if ref is None:
                if not self._make_room(chunk):
                    for taken in refs:
                        self.give_back(taken, chunk)
                    return None
                continue
            region, _slot = split_ref(ref)
            record = self.region(region)
            self._regions[region] = record._replace(live=record.live + 1)
            refs.append(ref)
        return refs

    def claim(self, refs: list[int], claim: Claim) -> None:
        raw = pack(claim)
        for ref in refs:
            self.txn.put(u64(ref), raw, db=self.db.claims)

    def _pop_free(self, chunk: int) -> int | None:
        cursor = self._cursor("free")
        head = u32(chunk)
        if not cursor.set_range(head):
            return None
        key = cursor.key()
        if key[:4] != head:
            return None
        cursor.delete()
        return read_u64(key, 4)

    def _next_unused(self, chunk: int) -> int | None:
        size = self.size_class(chunk)
        if size.filling == NO_REGION:
            return None
        record = self.region(size.filling)
        if record.chunk_bytes == chunk and record.used < self.geometry.region_bytes // chunk:
            self._regions[size.filling] = record._replace(used=record.used + 1)
            return slot_ref(size.filling, record.used)
        self._sizes[chunk] = size._replace(filling=NO_REGION)
        return None

    def _lend_spare(self, chunk: int) -> bool:
        cursor = self._cursor("spare")
        if not cursor.first():
            return False
        region = read_u32(cursor.key())
        cursor.delete()
        self._lend(region, chunk)
        return True

    def _lend(self, region: int, chunk: int) -> None:
        self._regions[region] = Region(chunk, 0, 0)
        size = self.size_class(chunk)
        self._sizes[chunk] = SizeClass(size.regions + 1, region)

    def give_back(self, ref: int, chunk: int) -> None:
        """Return a slot of ``chunk`` bytes (a page evicted, deleted or replaced, or a failed write's)."""
        region, _slot = split_ref(ref)
        record = self.region(region)
        record = record._replace(live=max(0, record.live - 1))
        self._regions[region] = record
        if record.live == 0:
            self._release_region(region, record)
        else:
            self.txn.put(u32(chunk) + u64(ref), b"", db=self.db.free)

    def _release_region(self, region: int, record: Region) -> None:
        """A region with no live slot goes back to the spare regions (its given-back slots are dropped)."""
        self._drop_free(record.chunk_bytes, region)
        size = self.size_class(record.chunk_bytes)
        filling = NO_REGION if size.filling == region else size.filling
        self._sizes[record.chunk_bytes] = SizeClass(max(0, size.regions - 1), filling)
        self._regions[region] = Region(0, 0, 0)
        self.txn.put(u32(region), b"", db=self.db.spare)

    def _drop_free(self, chunk: int, region: int) -> None:
        cursor = self._cursor("free")
        begin, end = u32(chunk) + u64(slot_ref(region, 0)), u32(chunk) + u64(slot_ref(region + 1, 0))
        if not cursor.set_range(begin):
            return
        while cursor.key() < end:
            if not cursor.delete():
                break

    # ------------------------------------------------------------ replacement
    def oldest(self, chunk: int, tiers: tuple[int, ...] = (0, PINNED), group: int | None = None) -> bytes | None:
        """The recency key of the least recent page of ``chunk`` bytes (of ``group``, or any), lowest tier first."""
        cursor = self._cursor("recency")
        groups = self.groups() if group is None else [group]
        for tier in tiers:
            best: bytes | None = None
            for member in groups:
                prefix = recency_prefix(member, chunk, tier)
                if cursor.set_range(prefix):
                    key = cursor.key()
                    if key[:7] == prefix and (best is None or recency_seq(key) < recency_seq(best)):
                        best = key
            if best is not None:
                return best
        return None

    def chunk_sizes(self) -> list[int]:
        """Every chunk size that holds regions."""
        cursor = self._cursor("sizes")
        return [read_u32(key) for key in cursor.iternext(keys=True, values=False)] if cursor.first() else []

    def _other_oldest(self, chunk: int) -> tuple[int, bytes] | None:
        """(chunk size, recency key) of the least recent unpinned page of any other chunk size."""
        best: tuple[int, bytes] | None = None
        for other in self.chunk_sizes():
            if other == chunk:
                continue
            key = self.oldest(other, (0,))
            if key is not None and (best is None or recency_seq(key) < recency_seq(best[1])):
                best = (other, key)
        return best

    def _make_room(self, chunk: int) -> bool:
        """Evict so that a slot of ``chunk`` bytes can be had; ``False`` when nothing can be evicted."""
        own = self.oldest(chunk)
        other = self._other_oldest(chunk)
        older = other is not None and (
            own is None or self.now - recency_seq(other[1]) > STEAL_FACTOR * (self.now - recency_seq(own))
        )
        if older and other is not None and self._take_region(other[1], chunk):
            return True
        if own is None:
            return False
        self.evict(own)
        return True

    def evict(self, recency: bytes) -> None:
        """Remove the page of a recency key (counted in ``evicted``)."""
        digest = recency[-16:]
        raw = self.txn.get(digest, db=self.db.pages)
        if raw is None:  # a recency key without its page: drop it
            self.txn.delete(recency, db=self.db.recency)
            return
        self.remove(digest, decode_entry(raw))
        self.evicted += 1

    def remove(self, digest: bytes, entry: Entry) -> None:
        """Remove a committed page: its entry, recency key and slots."""
        txn, db = self.txn, self.db
        txn.delete(digest, db=db.pages)
        txn.delete(entry.recency_key(digest), db=db.recency)
        for ref in entry.refs:
            txn.delete(u64(ref), db=db.slots)
            self.give_back(ref, entry.chunk_bytes)
        self.charge(entry.group, -entry.stored_bytes)

    def _take_region(self, recency: bytes, chunk: int) -> bool:
        """Evict every page in the region of the page of ``recency`` and lend the region to ``chunk``;
        ``False`` when a write in flight holds one of its slots."""
        raw = self.txn.get(recency[-16:], db=self.db.pages)
        if raw is None:
            self.txn.delete(recency, db=self.db.recency)
            return True
        region = split_ref(decode_entry(raw).refs[0])[0]
        claims = self._cursor("claims")
        if claims.set_range(u64(slot_ref(region, 0))) and claims.key() < u64(slot_ref(region + 1, 0)):
            return False
        record = self.region(region)
        for slot in range(record.used):
            digest = self.txn.get(u64(slot_ref(region, slot)), db=self.db.slots)
            if digest is None:
                continue
            page = self.txn.get(digest, db=self.db.pages)
            if page is not None:
                self.remove(digest, decode_entry(page))
                self.evicted += 1
            else:
                self.txn.delete(u64(slot_ref(region, slot)), db=self.db.slots)
        record = self.region(region)
        if record.chunk_bytes:  # not released by the evictions (a stray live count): release it now
            self._release_region(region, record)
        cursor = self._cursor("spare")
        if cursor.set_key(u32(region)):
            cursor.delete()
        self._lend(region, chunk)
        return True

    # ------------------------------------------------------------ claims of writers that died
    def sweep_claims(self, doomed: Callable[[Claim], bool] | None = None) -> int:
        """Take back the slots of claims older than :data:`CLAIM_TTL_NS` (or those ``doomed`` picks);
        how many were taken back."""
        if doomed is None:
            doomed = self._stale
        cursor = self._cursor("claims")
        stale: list[int] = []
        if cursor.first():
            stale = [read_u64(key) for key, value in cursor.iternext() if doomed(unpack(Claim, value))]
        for ref in stale:
            self.txn.delete(u64(ref), db=self.db.claims)
            region, _slot = split_ref(ref)
            self.give_back(ref, self.region(region).chunk_bytes)
        return len(stale)

    def _stale(self, claim: Claim) -> bool:
        return self.now - claim.claimed_ns > CLAIM_TTL_NS
