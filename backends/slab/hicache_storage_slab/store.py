"""One process's handle on a store: page I/O between host memory and slots, through the index.

A write of a batch (pages of one size):

1. Pages already stored with the same bytes are not written again: they become recent.
2. The index claims slots for the others (one transaction; replacement makes room).
3. Each page is ``pwritev``-ed into its slots straight from host memory and hashed as it passes.
4. The index publishes the pages (one transaction); until then no reader finds them, and an older
   copy of the same key stays readable.

A read looks the keys up (no lock), ``preadv``-s each page straight into host memory and checks its
length and XXH3 checksum (seeded by the key's digest, so another key's bytes fail it), and its
authentication tag with an integrity secret. A slot rewritten under the reader fails the check and
reads as a miss (``read_races``); a damaged page, as a miss counted as ``integrity_failures``.

Replacement order: ``seq`` is the time of a page's write or of a read that made it recent (one not
made recent for ``read_recency_s``), lowered by the page's position in its batch, so the later pages
of a chain are older than the earlier ones and go first. A write that names the page its first page
continues (the last of ``prefix_keys``) places its pages just below that page when it is stored: a
continuation is never more recent than what it continues.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import xxhash

from hicache_storage.plugin import StoredPage
from hicache_storage.plugin.io_threads import IoThreads
from hicache_storage.plugin.page_format import PageRecordError, RecordCodec
from hicache_storage.plugin.vectored_io import IOV_MAX

from .geometry import ChunkPlan
from .index import Staged, Touch, Written
from .page_io import DirectRefused, direct_aligned, page_checksum, read_hashed, segment_range, write_hashed
from .records import PINNED, Entry, checksum_seed, decode_entry, key_digest, one_chunk, split_ref
from .store_files import DataFile, OpenStore

__all__ = ["Store", "WriteSettings"]

_Hasher = xxhash.xxh3_64
#: Seconds between two sweeps of claims left by writers that died.
SWEEP_INTERVAL_S = 10.0

Bump = Callable[..., None]


@dataclass(frozen=True)
class WriteSettings:
    """Who writes: the namespace whose quota and group the pages count against, and whether it is pinned."""

    namespace: str
    pinned: bool
    quota_bytes: int | None
    read_recency_s: float | None
    durable: bool


@dataclass
class _ReadPlan:
    """The stored pages of one read: ``whole`` with their (descriptor, offset, length, seed, checksum) in ``slots``,
    ``other`` with their entries, and the ``seq`` of each (by position)."""

    whole: list[int] = field(default_factory=list)
    slots: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    other: list[int] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    seqs: dict[int, int] = field(default_factory=dict)


class _RunRead(NamedTuple):
    """What a run of a read found: per page ``True``, ``False`` (failed its checks) or ``None`` (not
    stored under its key), the key digests, the entries as read, and the ``seq`` of each page found."""

    results: list[bool | None]
    digests: list[bytes]
    raws: list[bytes | None]
    seqs: dict[int, int]


class Store:
    """Page I/O on an open store (thread-safe)."""

    def __init__(
        self, opened: OpenStore, settings: WriteSettings, codec: RecordCodec | None, bump: Bump, io: IoThreads
    ) -> None:
        self.opened = opened
        self.geometry = opened.geometry
        self._settings = settings
        self._codec = codec if codec is not None and codec.authenticated else None
        self._bump = bump
        self._io = io
        self._tier = PINNED if settings.pinned else 0
        self._touch_ns = None if settings.read_recency_s is None else int(settings.read_recency_s * 1e9)
        self._plans: dict[int, ChunkPlan] = {}
        self._regions_per_file = opened.geometry.regions_per_file
        self._region_bytes = opened.geometry.region_bytes
        self._last_sweep = 0.0
        self._lock = threading.Lock()
        self._writing = 0
        self._room_faults = opened.index.room_faults
        self._idle = threading.Condition(self._lock)

    @property
    def files(self) -> list[DataFile]:
        return self.opened.files

    def plan(self, page_bytes: int) -> ChunkPlan:
        found = self._plans.get(page_bytes)
        if found is None:
            found = self._plans[page_bytes] = self.geometry.chunk_plan(page_bytes)
        return found

    def _where(self, ref: int, chunk_bytes: int) -> tuple[DataFile, int]:
        region, slot = split_ref(ref)
        index, offset = self.geometry.locate(region, slot, chunk_bytes)
        return self.opened.files[index], offset

    # ------------------------------------------------------------ write
    def write(
        self, keys: Sequence[str], pages: Sequence[Sequence[memoryview]], page_bytes: int, parent: str | None = None
    ) -> list[bool]:
        """Store each page under its key; ``True`` once it is readable. Pages of another size than
        ``page_bytes`` are refused (``False``). ``parent``: the storage key of the page the batch's
        first page continues, when the caller named it."""
        with self._lock:
            self._writing += 1
        try:
            return self._write(keys, pages, page_bytes, parent)
        finally:
            with self._lock:
                self._writing -= 1
                if not self._writing:
                    self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the writes in flight to end; whether none is left."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._writing, timeout_s)

    def _write(
        self, keys: Sequence[str], pages: Sequence[Sequence[memoryview]], page_bytes: int, parent: str | None
    ) -> list[bool]:
        index = self.opened.index
        plan = self.plan(page_bytes)
        raw_keys = [key.encode() for key in keys]
        digests = [key_digest(raw) for raw in raw_keys]
        now = time.time_ns()
        base = self._below_parent(parent, now)
        seqs = [base - position for position in range(len(keys))]
        results = [False] * len(keys)
        touches: list[Touch] = []
        pending: list[int] = []
        for position, (digest, entry) in enumerate(zip(digests, index.lookup(digests), strict=True)):
            page = pages[position]
            if sum(segment.nbytes for segment in page) != page_bytes:
                continue
            if entry is not None and self._same_bytes(entry, raw_keys[position], page, digest):
                touches.append(Touch(digest, entry.seq, seqs[position]))
                results[position] = True
                continue
            pending.append(position)
        if not pending:
            if touches:
                index.touch(touches)
            return results
        staged, outcome = index.stage(
            [(digests[i], plan.chunk_bytes, plan.chunks) for i in pending],
            self._settings.namespace,
            quota=self._settings.quota_bytes,
            sweep=self._sweep_due(),
        )
        self._count(outcome.evicted, outcome.taken_back)

        errors: list[Exception] = []

        def move(position: int, claim: Staged | None) -> Written | None:
            if claim is None:
                return None
            try:
                entry: Entry | None = self._write_page(plan, raw_keys[position], pages[position], claim, seqs[position])
            except Exception as error:  # its slots are given back at commit, then the error is raised
                errors.append(error)
                entry = None
            return Written(claim, entry)

        moved = self._io.map(move, pending, staged)
        written = [item for item in moved if item is not None]
        if self._settings.durable and any(item.entry is not None for item in written):
            for file in self.opened.files:
                os.fdatasync(file.fd)
        committed = index.commit(written, self._settings.namespace, touches)
        if self._settings.durable:
            index.sync()
        self._count(committed.evicted, 0)
        done = iter(committed.results)
        for position, item in zip(pending, moved, strict=True):
            results[position] = isinstance(item, Written) and next(done)
        races = sum(1 for item, ok in zip(written, committed.results, strict=True) if item.entry is not None and not ok)
        if races:
            self._bump("write_races", races)
        if any(claim is None for claim in staged):
            self._bump("no_room", sum(1 for claim in staged if claim is None))
        if errors:
            raise errors[0]
        return results

    def _write_page(self, plan: ChunkPlan, key: bytes, page: Sequence[memoryview], staged: Staged, seq: int) -> Entry:
        digest = staged.digest
        hasher = _Hasher(seed=checksum_seed(digest))
        for (offset, length), ref in zip(plan.bounds(), staged.refs, strict=True):
            file, where = self._where(ref, plan.chunk_bytes)
            views = list(page) if plan.chunks == 1 else segment_range(page, offset, length)
            self._write_chunk(file, views, where, length, hasher)
        auth = b"" if self._codec is None else self._codec.header(key, page)
        checksum = int(hasher.intdigest())
        refs = tuple(staged.refs)
        return Entry(self._tier, 0, plan.chunk_bytes, plan.page_bytes, seq, checksum, time.time_ns(), refs, auth, key)

    def _write_chunk(
        self, file: DataFile, views: list[memoryview], offset: int, length: int, hasher: xxhash.xxh3_64
    ) -> None:
        if file.direct_fd is not None and direct_aligned(views):
            try:
                write_hashed(file.direct_fd, views, offset, length, hasher)
                return
            except DirectRefused:  # refused before a byte moved or was hashed
                self._bump("direct_io_fallbacks")
        write_hashed(file.fd, views, offset, length, hasher)

    def _same_bytes(self, entry: Entry, key: bytes, page: Sequence[memoryview], digest: bytes) -> bool:
        """Whether ``entry`` already holds exactly ``page`` (and its authentication, with a secret)."""
        if entry.length != sum(segment.nbytes for segment in page) or entry.tier != self._tier:
            return False
        if page_checksum(page, digest) != entry.checksum:
            return False
        return self._codec is None or entry.auth == self._codec.header(key, page)

    def _below_parent(self, parent: str | None, now: int) -> int:
        """The ``seq`` of a written batch's first page: ``now``, or just below its parent's when the
        parent is stored (a page written never becomes more recent than the page it continues)."""
        if parent is None:
            return now
        entry = self.opened.index.lookup([key_digest(parent.encode())])[0]
        return now if entry is None else min(now, entry.seq - 1)

    def _sweep_due(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last_sweep < SWEEP_INTERVAL_S:
                return False
            self._last_sweep = now
            return True

    def _count(self, evicted: int, taken_back: int) -> None:
        room_faults = self.opened.index.room_faults
        if room_faults > self._room_faults:
            self._bump("index_room_faults", room_faults - self._room_faults)
            self._room_faults = room_faults
        if evicted:
            self._bump("evictions", evicted)
        if taken_back:
            self._bump("claims_taken_back", taken_back)

    # ------------------------------------------------------------ read
    def read(self, keys: Sequence[str], pages: Sequence[Sequence[memoryview]]) -> list[bool]:
        """Fill each page with its stored bytes; ``False`` for a miss or a page failing its checks.
        Pages of one call have one size. Pages read become recent (see the module docstring)."""
        length = sum(segment.nbytes for segment in pages[0]) if pages else 0
        runs = self._io.runs(len(keys), lambda begin, end: self._read_run(keys[begin:end], pages[begin:end], length))
        if len(runs) == 1 and False not in runs[0].results:  # one thread, no page failing its checks
            run = runs[0]
            if self._touch_ns is not None:
                self._touch_read(run.digests, run.seqs, run.results)
            return [ok is True for ok in run.results]
        results: list[bool] = []
        digests: list[bytes] = []
        failed: list[int] = []
        failed_raws: list[bytes | None] = []
        seqs: dict[int, int] = {}
        for run in runs:
            start = len(results)
            for position, ok in enumerate(run.results, start):
                results.append(ok is True)
                if ok is False:
                    failed.append(position)
                    failed_raws.append(run.raws[position - start])
            seqs.update((start + position, seq) for position, seq in run.seqs.items())
            digests.extend(run.digests)
        if failed:
            self._classify_failures([digests[i] for i in failed], failed_raws)
        if self._touch_ns is not None:
            self._touch_read(digests, seqs, results)
        return results

    def _read_run(self, keys: Sequence[str], pages: Sequence[Sequence[memoryview]], length: int) -> _RunRead:
        """Read a run of a batch's pages on one thread: the keys are looked up and every decision is
        taken before the first byte moves, so the loop that moves the pages touches little besides
        them (each page evicts much of the CPU cache)."""
        raw_keys = [key.encode() for key in keys]
        digests = [key_digest(raw) for raw in raw_keys]
        raws = self.opened.index.lookup_raw(digests)
        plan = self._plan_reads(raw_keys, digests, raws, length, pages)
        results: list[bool | None] = [None] * len(keys)
        read_whole = self._read_whole
        for position, slot in zip(plan.whole, plan.slots, strict=True):
            results[position] = read_whole(pages[position], slot)
        for position, entry in zip(plan.other, plan.entries, strict=True):
            results[position] = self._read_page(entry, raw_keys[position], digests[position], pages[position])
        return _RunRead(results, digests, raws, plan.seqs)

    @staticmethod
    def _read_whole(page: Sequence[memoryview], slot: tuple[int, int, int, int, int]) -> bool:
        """Move a page stored as one chunk with one buffered ``preadv`` and check its length and XXH3
        checksum; ``slot``: (descriptor, offset, length, seed, checksum)."""
        fd, offset, length, seed, checksum = slot
        if os.preadv(fd, page, offset) != length:
            return False
        hasher = _Hasher(seed=seed)
        for segment in page:
            hasher.update(segment)
        return hasher.intdigest() == checksum

    def _plan_reads(
        self,
        keys: list[bytes],
        digests: list[bytes],
        raws: list[bytes | None],
        length: int,
        pages: Sequence[Sequence[memoryview]],
    ) -> _ReadPlan:
        """Sort the stored pages of a read into those moved by one buffered ``preadv`` and checked by
        XXH3 alone, and the others (chunked, ``O_DIRECT``, authenticated, of another size or key)."""
        plan = _ReadPlan()
        files = self.opened.files
        # per data file: its buffered descriptor, or -1 where pages move with O_DIRECT
        buffered = [-1 if file.direct_fd is not None else file.fd for file in files]
        per_file = self._regions_per_file
        region_bytes = self._region_bytes
        plain = self._codec is None and length > 0 and self.plan(length).chunks == 1
        whole, slots, seqs = plan.whole, plan.slots, plan.seqs
        for position, raw in enumerate(raws):
            if raw is None:
                continue
            found = one_chunk(raw, keys[position]) if plain else None
            if found is not None:
                ref, chunk_bytes, stored_length, seq, checksum = found
                seqs[position] = seq
                region = ref >> 32
                fd = buffered[region // per_file]
                if stored_length == length and chunk_bytes >= length and fd >= 0 and len(pages[position]) <= IOV_MAX:
                    whole.append(position)
                    offset = (region % per_file) * region_bytes + (ref & 0xFFFFFFFF) * chunk_bytes
                    slots.append((fd, offset, length, checksum_seed(digests[position]), checksum))
                    continue
            entry = decode_entry(raw)
            if entry.key != keys[position]:
                continue
            seqs[position] = entry.seq
            plan.other.append(position)
            plan.entries.append(entry)
        return plan

    def _touch_read(self, digests: list[bytes], seqs: dict[int, int], results: Sequence[bool | None]) -> None:
        """Make the pages read recent, those not made recent for ``read_recency_s``."""
        assert self._touch_ns is not None
        now = time.time_ns()
        touches = [
            Touch(digests[position], seq, now - position)
            for position, seq in seqs.items()
            if results[position] is True and now - position - seq >= self._touch_ns
        ]
        if touches:
            self.opened.index.touch(touches)

    def _read_page(self, entry: Entry, key: bytes, digest: bytes, page: Sequence[memoryview]) -> bool | None:
        """Whether the page's bytes passed their checks; ``None`` (a plain miss) when the entry is not of
        this key or of this page size."""
        length = sum(segment.nbytes for segment in page)
        if entry.length != length or entry.key != key:
            return None
        plan = self.plan(length)
        if plan.chunk_bytes != entry.chunk_bytes or plan.chunks != len(entry.refs):
            return None
        hasher = _Hasher(seed=checksum_seed(digest))
        for (offset, size), ref in zip(plan.bounds(), entry.refs, strict=True):
            file, where = self._where(ref, entry.chunk_bytes)
            views = list(page) if plan.chunks == 1 else segment_range(page, offset, size)
            if not self._read_chunk(file, views, where, size, hasher):
                return False
        if int(hasher.intdigest()) != entry.checksum:
            return False
        return self._codec is None or self._authentic(entry, key, page)

    def _read_chunk(
        self, file: DataFile, views: list[memoryview], offset: int, length: int, hasher: xxhash.xxh3_64
    ) -> bool:
        if file.direct_fd is not None and direct_aligned(views):
            try:
                return read_hashed(file.direct_fd, views, offset, length, hasher)
            except DirectRefused:  # refused before a byte moved or was hashed
                self._bump("direct_io_fallbacks")
        return read_hashed(file.fd, views, offset, length, hasher)

    def _authentic(self, entry: Entry, key: bytes, page: Sequence[memoryview]) -> bool:
        assert self._codec is not None
        try:
            parsed = self._codec.check_header(entry.auth, key, entry.length)
        except PageRecordError:
            return False
        return self._codec.tag_ok(parsed, key, page)

    def _classify_failures(self, digests: list[bytes], seen: list[bytes | None]) -> None:
        """A page that failed its checks: a race when the index has changed it since, else damage.

        A damaged page's entry is removed, so that writing the page again stores it anew (a write of
        the bytes an entry records is otherwise taken as already stored)."""
        now = self.opened.index.lookup_raw(digests)
        damaged = [digest for digest, before, after in zip(digests, seen, now, strict=True) if before == after]
        races = len(digests) - len(damaged)
        if races:
            self._bump("read_races", races)
        if damaged:
            self._bump("integrity_failures", len(damaged))
            self.opened.index.delete(damaged)

    # ------------------------------------------------------------ other calls
    def exists(self, keys: Sequence[str]) -> list[bool]:
        return self.opened.index.contains([key_digest(key.encode()) for key in keys])

    def delete(self, keys: Sequence[str]) -> None:
        self.opened.index.delete([key_digest(key.encode()) for key in keys])
        if self._settings.durable:
            self.opened.index.sync()

    def clear(self, prefixes: Sequence[str] | None) -> None:
        """Remove the pages whose keys start with one of ``prefixes`` (``None``: every page)."""
        index = self.opened.index
        if prefixes is None:
            index.reset(bytes.fromhex(self.opened.state["store_id"]))
        else:
            index.clear([prefix.encode() for prefix in prefixes])

    def listing(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Up to ``limit`` pages whose key starts with ``prefix``, in digest order after ``cursor``."""
        wanted = prefix.encode()
        after = bytes.fromhex(cursor) if cursor else None
        found: list[StoredPage] = []
        last: bytes | None = None
        for digest, entry in self.opened.index.entries(after):
            if not entry.key.startswith(wanted):
                continue
            if len(found) == limit:
                return found, last.hex() if last is not None else None
            found.append(StoredPage(entry.key.decode(errors="replace"), entry.stored_bytes, entry.written_ns / 1e9))
            last = digest
        return found, None

    def locate(self, key: str) -> tuple[Entry, list[tuple[DataFile, int]]] | None:
        """The entry of ``key`` and (file, offset) of each of its chunks, or ``None`` (for tools)."""
        entry = self.opened.index.lookup([key_digest(key.encode())])[0]
        if entry is None:
            return None
        return entry, [self._where(ref, entry.chunk_bytes) for ref in entry.refs]
