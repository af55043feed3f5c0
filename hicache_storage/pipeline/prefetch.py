"""Load-back path: lookup, host allocation (or parking), read, staging, admission to the device.

With sidecar components a prefix is restorable only where KV and every gating sidecar can be
restored: the lookup asks ``batch_exists_v2`` for the restorable prefix lengths (and ranks agree
on their intersection through the :class:`~hicache_storage.pipeline.lockstep.RankSync`), host
units of every component are allocated together, the reads fall back to a shorter restorable
prefix when a read comes back short, and admission copies every component to the device or none.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..errors import InvalidRequestError
from .buffer_cache import BufferPageCache
from .copy_engine import CopyHandle
from .device_pool import pages_to_tokens
from .parts import Stage, StageParts
from .sidecars import Units
from .types import Admission, PrefetchRequest, PrefetchState, PrefetchStatus

__all__ = ["PrefetchStage"]

_FINISHED_KEPT = 16384
#: Shorter restorable prefixes tried after a sidecar read comes back short.
_SIDECAR_FALLBACKS = 2


@dataclass
class _Load:
    request: PrefetchRequest
    start: int  # first page (index into request.hashes) looked up
    state: PrefetchState
    since_tick: int
    hit_pages: int = 0
    kv_pages: int = 0  # KV pages found beyond the splice point (>= hit_pages)
    restorable: list[int] = field(default_factory=list)  # agreed restorable prefix ends (absolute pages)
    hashes: list[str] = field(default_factory=list)  # pages held, in chain order
    pages: list[int] = field(default_factory=list)  # host page of each
    owned: list[bool] = field(default_factory=list)  # allocated by this load (else a retained reference)
    sidecars: dict[str, Units] = field(default_factory=dict)  # units held for the prefix end
    staged_at: float = 0.0

    @property
    def owner(self) -> tuple[str, str]:
        return ("load", self.request.request_id)


@dataclass
class _Copy:
    handle: CopyHandle
    hashes: list[str]
    pages: list[int]
    owned: list[bool]
    owner: tuple[str, str]
    sidecars: dict[str, Units] = field(default_factory=dict)
    handles: list[CopyHandle] = field(default_factory=list)

    def done(self, wait: bool) -> bool:
        for handle in (self.handle, *self.handles):
            if wait:
                handle.wait()
            if not handle.done():
                return False
        return True


class PrefetchStage(Stage):
    """Prefetches move QUERYING → (PARKED →) STAGED → ADMITTED, or end as MISS, ABORTED, TIMED_OUT.

    Host pages are allocated exactly to the hit; a request that cannot get them is parked, and
    parked requests are served first, in arrival order. A read keeps only its leading run of
    pages read successfully. Staged pages are held until :meth:`admit`, :meth:`abort` or the
    timeout; after the host→device copy has landed they are freed (or retained).
    """

    def __init__(self, parts: StageParts) -> None:
        super().__init__(parts)
        self.retained: BufferPageCache | None = self.staging.retained
        self.active: dict[str, _Load] = {}
        self.new: deque[_Load] = deque()
        self.parked: deque[_Load] = deque()
        self.copies: list[_Copy] = []
        self.finished: OrderedDict[str, PrefetchStatus] = OrderedDict()
        self.events: list[PrefetchStatus] = []
        self.tick = 0

    # ------------------------------------------------------------ engine calls
    def submit(self, request: PrefetchRequest) -> None:
        """Queue a lookup for the next tick. Raises :class:`InvalidRequestError` for a bad request."""
        if request.request_id in self.active:
            raise InvalidRequestError(f"prefetch {request.request_id!r} is already in progress")
        start = self._splice_pages(request.splice_point)
        if start > len(request.hashes):
            raise InvalidRequestError(
                f"prefetch {request.request_id!r}: splice_point {request.splice_point} is beyond its "
                f"{len(request.hashes)} pages"
            )
        load = _Load(request, start, PrefetchState.QUERYING, self.tick)
        self.active[request.request_id] = load
        self.finished.pop(request.request_id, None)
        self.new.append(load)
        self.metrics.add("prefetch_requests")

    def admit(self, request_id: str, splice_point: int, device_pages: Sequence[int] | None = None) -> Admission:
        """Load the staged pages that continue the device prefix at ``splice_point`` tokens.

        If the device prefix grew since the prefetch, the staged pages it now covers are dropped;
        if it shrank, none of the staged pages attaches to it and all are dropped. A prefetch not
        yet staged is cancelled. The pages land in ``device_pages`` (page numbers of the device
        pool, allocated by the caller and still its own; the first ones are filled, in order), or
        without them in pages taken from the device pool (owner ``request_id``); when there are
        too few the load is trimmed to what fits. Destination pages that are out of range,
        repeated or not allocated raise :class:`InvalidRequestError` before anything changes.
        With sidecars the load is all or nothing: the KV pages up to the staged prefix end and
        every sidecar's units, or none.
        """
        new_start = self._splice_pages(splice_point)
        if device_pages is not None:
            self._check_device_pages(request_id, device_pages)
        load = self.active.get(request_id)
        if load is None:
            return _nothing(request_id, splice_point)
        if load.state is not PrefetchState.STAGED:
            self._end(load, PrefetchState.ADMITTED)
            self.log("admit", request_id, 0)
            return _nothing(request_id, splice_point)
        skip = new_start - load.start
        use = 0 if skip < 0 else max(0, len(load.pages) - skip)
        side_devices: dict[str, torch.Tensor] = {}
        room = self.device_pool.free_pages if device_pages is None else len(device_pages)
        if load.sidecars:
            fits = 0 <= skip <= len(load.pages) and use <= room
            taken = self._alloc_sidecar_devices(load, request_id) if fits else None
            if taken is None:  # every component or none
                use = 0
                self.sidecars.release(load.sidecars)
                load.sidecars = {}
            else:
                side_devices = taken
        use = min(use, room)
        first = max(skip, 0)
        if device_pages is None:
            allocated = self.device_pool.alloc_pages(use, owner=request_id)
            assert allocated is not None
            targets = allocated
        else:
            targets = list(device_pages[:use])
        device_tokens = pages_to_tokens(targets, self.page_size)
        now = self.clock()
        self.metrics.observe("staged_wait", now - load.staged_at)
        end = first + use  # pages [first, end) are loaded, the others discarded
        pages = load.pages[first:end]
        handle = self.copier.host_to_device(pages, targets)
        side_handles = self.sidecars.to_device(load.sidecars) if load.sidecars else []
        self.metrics.observe("host_to_device", self.clock() - now)
        loaded = load.hashes[first:end]
        self.copies.append(_Copy(handle, loaded, pages, load.owned[first:end], load.owner, load.sidecars, side_handles))
        discard = len(load.pages) - use
        if discard:
            self.staging.release(
                load.hashes[:first] + load.hashes[end:],
                load.pages[:first] + load.pages[end:],
                load.owned[:first] + load.owned[end:],
                discard,
            )
        self.metrics.add("prefetch_loaded_tokens", use * self.page_size)
        self.metrics.add("prefetch_discarded_tokens", discard * self.page_size)
        self.metrics.add("bytes_host_to_device", use * self.page_bytes)
        load.hashes, load.pages, load.owned, load.sidecars = [], [], [], {}
        self._end(load, PrefetchState.ADMITTED)
        self.log("admit", request_id, use, *sorted(side_devices))
        return Admission(request_id, splice_point, tuple(loaded), device_tokens, handle.event, side_devices)

    def _check_device_pages(self, request_id: str, device_pages: Sequence[int]) -> None:
        """Raise :class:`InvalidRequestError` unless ``device_pages`` are distinct, allocated device pages."""
        pool = self.device_pool
        bad = [p for p in device_pages if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < pool.page_num]
        if bad:
            raise InvalidRequestError(
                f"admit({request_id!r}): device pages {bad[:8]} are not page numbers of a pool of {pool.page_num}"
            )
        if len(set(device_pages)) != len(device_pages):
            raise InvalidRequestError(f"admit({request_id!r}): a device page appears twice: {list(device_pages)[:16]}")
        unallocated = pool.unallocated(device_pages)
        if unallocated:
            raise InvalidRequestError(
                f"admit({request_id!r}): device pages {unallocated[:8]} are not allocated (allocate them first)"
            )

    def _alloc_sidecar_devices(self, load: _Load, request_id: str) -> dict[str, torch.Tensor] | None:
        """Device units for every staged sidecar part (owner ``request_id``), or ``None`` (none kept)."""
        taken: list[tuple[str, torch.Tensor]] = []
        for name, units in load.sidecars.items():
            component = self.sidecars.by_name[name].component
            pages = component.device.alloc_pages(len(units), owner=request_id)
            if pages is None:
                for undo_name, undo in taken:
                    self.sidecars.by_name[undo_name].component.device.free(undo)
                return None
            taken.append((name, pages_to_tokens(pages, component.unit_tokens)))
            units.device = pages
        return dict(taken)

    def abort(self, request_id: str) -> bool:
        """Release everything a prefetch holds; ``False`` if it is not in progress."""
        load = self.active.get(request_id)
        if load is None:
            return False
        self.metrics.add("prefetch_aborts")
        self._discard(load, PrefetchState.ABORTED)
        self.log("abort", request_id)
        return True

    # ------------------------------------------------------------ tick
    def run(self, tick: int) -> None:
        """One tick of the load path: finished copies, timeouts, parked requests, new lookups."""
        self.tick = tick
        self.complete_copies(wait=False)
        self._expire()
        while self.parked:
            if not self._try_stage(self.parked[0]):
                break
            self.parked.popleft()
        while self.new:
            load = self.new.popleft()
            if load.state is not PrefetchState.QUERYING:
                continue  # aborted before its lookup
            self._lookup(load)
            if load.state is not PrefetchState.QUERYING:
                continue
            if self.parked or not self._try_stage(load):
                self._park(load)

    def complete_copies(self, wait: bool) -> None:
        """Release host pages of host→device copies that have landed (all of them when ``wait``)."""
        pending: list[_Copy] = []
        for copy in self.copies:
            if copy.done(wait):
                self.staging.release(copy.hashes, copy.pages, copy.owned, len(copy.pages))
                self.sidecars.release(copy.sidecars)
            else:
                pending.append(copy)
        self.copies = pending

    def release_staged(self) -> None:
        """Discard every staged prefetch (used when draining)."""
        for load in [load for load in self.active.values() if load.state is PrefetchState.STAGED]:
            self._discard(load, PrefetchState.ABORTED)
            self.log("release", load.request.request_id)

    def occupied_tokens(self) -> int:
        """Host tokens held by loads (staged pages and copies in flight, retained references included)."""
        pages = sum(len(load.pages) for load in self.active.values())
        pages += sum(len(copy.pages) for copy in self.copies)
        return pages * self.page_size

    def occupied_units(self) -> dict[str, int]:
        """Host units per sidecar held by loads and copies in flight."""
        if not self.sidecars:
            return {}
        holders = [load.sidecars for load in self.active.values()] + [copy.sidecars for copy in self.copies]
        return self.sidecars.occupied(holders)

    @property
    def busy(self) -> bool:
        """Whether lookups, parked requests or copies are pending (staged prefetches aside)."""
        return bool(self.new or self.parked or self.copies)

    def status(self, request_id: str) -> PrefetchStatus | None:
        """Current status, or ``None`` if the request is unknown (or long finished)."""
        load = self.active.get(request_id)
        if load is not None:
            return self._status(load)
        return self.finished.get(request_id)

    # ------------------------------------------------------------ steps
    def _lookup(self, load: _Load) -> None:
        cap = self.staging.pool.page_num
        hashes = load.request.hashes
        keys = list(hashes[load.start : load.start + cap])
        begin = self.clock()
        if self.sidecars:
            hit, kv_found = self._lookup_pools(load, cap)
        else:
            hit = kv_found = self.storage.leading_hits(keys)
            if hit < len(keys):
                self.existence.invalidate_beyond(self.config.pool_name, keys, hit)
        self.metrics.observe("exists", self.clock() - begin)
        load.hit_pages, load.kv_pages = hit, kv_found
        self.metrics.add("prefetch_hit_tokens", hit * self.page_size)
        self.metrics.add("prefetch_miss_tokens", (len(keys) - hit) * self.page_size)
        self.metrics.add("prefetch_lost_tokens", (kv_found - hit) * self.page_size)
        self.log("lookup", load.request.request_id, hit)
        if hit == 0:
            self._end(load, PrefetchState.MISS)

    def _lookup_pools(self, load: _Load, cap: int) -> tuple[int, int]:
        """Multi-pool lookup: (hit pages, KV pages found) beyond the splice point; sets ``load.restorable``."""
        start = load.start
        hashes = load.request.hashes
        offset = max(0, start - self.sidecars.overlap)
        found = self.storage.restorable(
            hashes[offset : start + cap], self.sidecars.lookup_pools, offset=offset, after=start
        )
        load.restorable = found.lengths  # ascending, each in (start, start + cap]
        if self.rank_sync is not None:
            agreed = self.rank_sync.agree(load.request.request_id, "query", frozenset(found.lengths))
            load.restorable = sorted(length for length in agreed if start < length <= start + cap)
        kv_end = min(found.kv_end, start + cap)
        if kv_end < min(len(hashes), start + cap):
            self.existence.invalidate_beyond(self.config.pool_name, list(hashes[start : start + cap]), kv_end - start)
        for item in self.sidecars.items:  # a sidecar missing where the KV run ends: forget its beliefs there
            if found.boundaries.get(item.name, 0) < kv_end:
                positions = item.component.restore_positions(start, kv_end)
                self.existence.invalidate_beyond(item.name, [hashes[p] for p in positions], 0)
        end = load.restorable[-1] if load.restorable else start
        return end - start, max(0, kv_end - start)

    def _try_stage(self, load: _Load) -> bool:
        """Allocate host pages for the hit and read it; ``False`` (nothing held) if memory is short."""
        hashes = list(load.request.hashes[load.start : load.start + load.hit_pages])
        refs: dict[int, int] = {}
        if self.retained is not None:
            for position, page_hash in enumerate(hashes):
                page = self.retained.acquire(page_hash)
                if page is not None:
                    refs[position] = page
        fresh = self.staging.alloc(len(hashes) - len(refs), load.owner)
        side = self.sidecars.plan_restore(load.request.hashes, load.start, load.start + load.hit_pages)
        if fresh is not None and side and not self.sidecars.alloc(side, load.owner):
            self.staging.release(hashes[: len(fresh)], fresh, [True] * len(fresh), 0)
            fresh = None
        if fresh is None:
            for position in refs:
                assert self.retained is not None
                self.retained.release(hashes[position])
            return False
        if refs:
            fresh_iter = iter(fresh)
            pages = [refs[i] if i in refs else next(fresh_iter) for i in range(len(hashes))]
            owned = [i not in refs for i in range(len(hashes))]
            read_positions: Sequence[int] = [i for i in range(len(hashes)) if owned[i]]
            read_hashes, read_pages = [hashes[i] for i in read_positions], [pages[i] for i in read_positions]
        else:  # every page is read into a fresh one
            pages, owned, read_positions = fresh, [True] * len(hashes), range(len(hashes))
            read_hashes, read_pages = hashes, pages
        load.hashes, load.pages, load.owned = hashes, pages, owned
        begin = self.clock()
        read = self.storage.read_leading(read_hashes, read_pages)
        usable = read_positions[read] if read < len(read_positions) else len(hashes)
        if read < len(read_positions):
            self.existence.invalidate_beyond(self.config.pool_name, hashes, usable)
        if side:
            usable = self._stage_sidecars(load, side, usable)
        self.metrics.observe("read", self.clock() - begin)
        self.metrics.add("bytes_read", read * self.page_bytes)
        self.metrics.add("retained_hit_pages", sum(1 for i in range(usable) if not owned[i]) if refs else 0)
        if usable < len(hashes):
            self.metrics.add("prefetch_read_failed_tokens", (len(hashes) - usable) * self.page_size)
            self.staging.release(hashes[usable:], pages[usable:], owned[usable:], 0)
            del load.hashes[usable:], load.pages[usable:], load.owned[usable:]
        self.log("stage", load.request.request_id, usable)
        if usable == 0:
            self._end(load, PrefetchState.MISS)
            return True
        load.state = PrefetchState.STAGED
        load.since_tick = self.tick
        load.staged_at = self.clock()
        self.metrics.add("prefetch_staged_tokens", usable * self.page_size)
        self.events.append(self._status(load))
        return True

    def _stage_sidecars(self, load: _Load, side: dict[str, Units], usable: int) -> int:
        """Read the sidecar units for the longest restorable prefix the KV read allows; KV pages usable.

        A short sidecar read falls back to the next shorter restorable prefix (its units read
        afresh into the same host units) at most ``_SIDECAR_FALLBACKS`` times; then nothing is
        usable. Ranks then agree on the prefix end they all staged.
        """
        start = load.start
        limit = start + usable
        candidates = (end for end in reversed(load.restorable) if end <= limit)  # longest first
        end = start
        for _ in range(1 + _SIDECAR_FALLBACKS):
            target = next(candidates, None)
            if target is None:
                break
            if target != start + load.hit_pages:
                side = self._replan(load, side, target)
            if self.sidecars.read(side):
                end = target
                break
        if self.rank_sync is not None:
            agreed = self.rank_sync.agree(load.request.request_id, "read", frozenset({end} if end > start else ()))
            end = end if end in agreed else start
        if end == start:
            self.sidecars.release(side)
            load.sidecars = {}
            return 0
        load.sidecars = side
        return end - start

    def _replan(self, load: _Load, side: dict[str, Units], end: int) -> dict[str, Units]:
        """The sidecar units for prefix ``end``, reusing the host units already held (never more are needed)."""
        plan = self.sidecars.plan_restore(load.request.hashes, load.start, end)
        for name, units in plan.items():
            held = side[name].host
            units.host, spare = held[: len(units)], held[len(units) :]
            self.sidecars.by_name[name].staging.release(spare)
        return plan

    def _park(self, load: _Load) -> None:
        load.state = PrefetchState.PARKED
        load.since_tick = self.tick
        self.parked.append(load)
        self.metrics.add("prefetch_parked")
        self.log("park", load.request.request_id)

    def _expire(self) -> None:
        limit = self.config.prefetch_timeout_ticks
        for load in list(self.active.values()):
            waiting = load.state in (PrefetchState.PARKED, PrefetchState.STAGED)
            if waiting and self.tick - load.since_tick >= limit:
                self.metrics.add("prefetch_timeouts")
                self._discard(load, PrefetchState.TIMED_OUT)
                self.log("timeout", load.request.request_id)

    def _discard(self, load: _Load, state: PrefetchState) -> None:
        self.metrics.add("prefetch_discarded_tokens", len(load.pages) * self.page_size)
        self.staging.release(load.hashes, load.pages, load.owned, len(load.pages))
        self.sidecars.release(load.sidecars)
        load.hashes, load.pages, load.owned, load.sidecars = [], [], [], {}
        if load.state is PrefetchState.PARKED:
            self.parked.remove(load)
        self._end(load, state)

    def _end(self, load: _Load, state: PrefetchState) -> None:
        load.state = state
        request_id = load.request.request_id
        del self.active[request_id]
        status = self._status(load)
        self.finished[request_id] = status
        while len(self.finished) > _FINISHED_KEPT:
            self.finished.popitem(last=False)
        self.events.append(status)

    def _status(self, load: _Load) -> PrefetchStatus:
        return PrefetchStatus(load.request.request_id, load.state, load.hit_pages, len(load.pages), load.kv_pages)

    def _splice_pages(self, splice_point: int) -> int:
        if isinstance(splice_point, bool) or not isinstance(splice_point, int) or splice_point < 0:
            raise InvalidRequestError(f"splice_point must be a non-negative int, got {splice_point!r}")
        if splice_point % self.page_size:
            raise InvalidRequestError(f"splice_point {splice_point} is not a multiple of page_size={self.page_size}")
        return splice_point // self.page_size


def _nothing(request_id: str, splice_point: int) -> Admission:
    """An admission that loaded no page."""
    return Admission(request_id, splice_point, (), torch.empty(0, dtype=torch.int64))
