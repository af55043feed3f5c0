"""Mode ``cache`` for a hybrid model: host memory caches KV pages and sidecar units, storage behind it.

Host memory is an LRU of KV pages (as for a KV-only model) plus, per sidecar, an LRU of units
keyed by the KV page hash at their position. A prefix is restorable from host memory where every
sidecar's units for it are cached there; beyond the host's KV run, storage is asked with
``batch_exists_v2`` for its restorable prefixes. The longest prefix either can restore wins; the
units it needs come from host memory where cached, else from storage (``batch_get_v2``), and are
checked byte for byte. Every computed span writes its KV pages through to host and storage
(``batch_set_v1``) and its sidecar units to host and storage (``batch_set_v2``), one span per
checkpoint, as in ``buffer_only``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..pipeline import Component, MultiPoolCalls, PoolPart
from .kvdata import PageView, copy_pages, matching_prefix
from .prefix_cache import PageLRU
from .sidecars import UnitView, restorable_end, span_ends, unit_labels
from .storage_io import STORAGE_BATCH, StorageIO
from .tiers import CacheTier, LoadOutcome

__all__ = ["HybridCacheTier"]

#: Shorter restorable prefixes tried when a read comes back short.
_FALLBACKS = 2


class HybridCacheTier(CacheTier):
    """:class:`CacheTier` with sidecar units cached in host memory and stored with the v2 calls."""

    def __init__(
        self,
        device: PageView,
        host: HostKVPool,
        storage: StorageIO,
        backend: HiCacheStorage,
        *,
        components: Sequence[Component],
        host_ratio: float,
        checkpoint_pages: int,
    ) -> None:
        super().__init__(device, host, storage)
        self.components = list(components)
        self.checkpoint_pages = checkpoint_pages
        self.unit_pools = {c.name: c.make_host_pool(c.host_units_for(host_ratio)) for c in self.components}
        for name, pool in self.unit_pools.items():
            backend.register_mem_host_pool_v2(pool, name)
        backend.on_host_pools_registered()
        self.host_units = {c.name: int(self.unit_pools[c.name].size) // c.unit_tokens for c in self.components}
        self.views = {name: UnitView(pool) for name, pool in self.unit_pools.items()}
        self.unit_lru = {name: PageLRU(units) for name, units in self.host_units.items()}
        self.unit_stored: dict[str, set[str]] = {c.name: set() for c in self.components}
        self.calls = MultiPoolCalls(backend, host.page_size, STORAGE_BATCH)
        self.overlap = max((c.window - 1 for c in self.components), default=0)
        self.corrupt_units = 0
        #: Sidecar units acknowledged stored, per component.
        self.units_written = {c.name: 0 for c in self.components}

    # ------------------------------------------------------------ loads
    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        limit = len(device_slots)
        in_host = min(self.lru.match(hashes, start), limit)
        host_slots = [self.lru.slot(h) for h in hashes[start : start + in_host]]
        in_host = matching_prefix(self.host, host_slots, hashes[start : start + in_host])
        first = start + in_host
        outcome = LoadOutcome(kv_pages=in_host)
        host_end = restorable_end(self.components, lambda name, p: hashes[p] in self.unit_lru[name], start, first)
        candidates: list[int] = []
        if host_end < start + limit:  # storage may restore more, or hold the state the host lacks
            offset = max(0, start - self.overlap)
            found = self.calls.restorable(hashes[offset : start + limit], self.components, offset=offset, after=start)
            candidates = [end for end in found.lengths if end > host_end]
            outcome.kv_pages = max(in_host, found.kv_end - start)
        end, read = self._load_storage(hashes, start, first, candidates, outcome)
        if end <= start:  # storage restored nothing: the host's own restorable prefix, if its units check out
            end = host_end if self._units_ready(hashes, start, host_end, outcome) else start
        host_pages = min(end, first) - start
        copy_pages(self.device, device_slots[:host_pages], self.host, host_slots[:host_pages])
        if end > first:
            copy_pages(self.device, device_slots[host_pages : host_pages + end - first], self.host, read[: end - first])
        self.lru.touch(hashes[: max(end, first)])
        outcome.host_pages, outcome.storage_pages = host_pages, max(0, end - first)
        return outcome

    def _load_storage(
        self, hashes: list[str], start: int, first: int, candidates: list[int], outcome: LoadOutcome
    ) -> tuple[int, list[int]]:
        """Read KV ``[first, end)`` for the longest storage candidate whose units load; (end, host slots read)."""
        if not candidates:
            return start, []
        wanted = hashes[first : candidates[-1]]  # KV the host lacks (none when the host holds it all)
        slots = self.lru.reserve(len(wanted), protect=hashes[:first])
        got = self._read_checked(wanted[: len(slots)], slots)
        for page_hash, slot in zip(wanted[:got], slots[:got], strict=True):
            self.lru.insert(page_hash, slot)
            self.stored.add(page_hash)
        self.lru.release(slots[got:])
        tries = [end for end in candidates if end <= first + got][-1 - _FALLBACKS :]
        for end in reversed(tries):
            if self._units_ready(hashes, start, end, outcome):
                return end, slots[:got]
        return start, slots[:got]

    def _units_ready(self, hashes: list[str], start: int, end: int, outcome: LoadOutcome) -> bool:
        """Every sidecar unit prefix ``end`` needs is in host memory and checked (read from storage if not)."""
        if end <= start:
            return False
        missing: list[tuple[Component, list[str]]] = []
        for component in self.components:
            name = component.name
            keys = [hashes[p] for p in component.restore_positions(start, end)]
            cached = [k for k in keys if k in self.unit_lru[name]]
            units = [self.unit_lru[name].slot(k) for k in cached]
            good = self.views[name].matching(units, unit_labels(name, cached))
            if good < len(cached):
                self.corrupt_units += len(cached) - good
                return False
            self.unit_lru[name].touch(cached)
            outcome.units[f"{name}/host"] = outcome.units.get(f"{name}/host", 0) + len(cached)
            absent = [k for k in keys if k not in self.unit_lru[name]]
            if absent:
                missing.append((component, absent))
        return self._read_units(missing, outcome)

    def _read_units(self, missing: list[tuple[Component, list[str]]], outcome: LoadOutcome) -> bool:
        parts: list[PoolPart] = []
        for component, keys in missing:
            slots = self.unit_lru[component.name].reserve(len(keys), protect=keys)
            if len(slots) < len(keys):
                self.unit_lru[component.name].release(slots)
                return False
            parts.append(PoolPart(component.name, component.unit_tokens, keys, slots))
        if not parts:
            return True
        flags = self.calls.read_units(parts)
        ok = True
        for part in parts:
            name = part.name
            read = flags.get(name, [])
            if len(read) != len(part.units) or not all(read):  # a miss: nothing to check
                self.unit_lru[name].release(list(part.units))
                ok = False
                continue
            good = self.views[name].matching(list(part.units), unit_labels(name, list(part.hashes)))
            if good < len(part.units):
                self.corrupt_units += len(part.units) - good
                self.unit_lru[name].release(list(part.units))
                ok = False
                continue
            for key, unit in zip(part.hashes, part.units, strict=True):
                self.unit_lru[name].insert(key, unit)
                self.unit_stored[name].add(key)
            outcome.units[f"{name}/storage"] = outcome.units.get(f"{name}/storage", 0) + len(part.units)
        return ok

    # ------------------------------------------------------------ backups
    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        super().backup(hashes, begin, end, device_slots)
        parts: list[PoolPart] = []
        first = begin
        for stop in span_ends(begin, end, self.checkpoint_pages):
            for component in self.components:
                name = component.name
                lru = self.unit_lru[name]
                keys = [hashes[p] for p in component.backup_positions(first, stop)]
                fresh = [k for k in keys if k not in lru]
                slots = lru.reserve(len(fresh), protect=keys)
                fresh = fresh[: len(slots)]
                self.views[name].fill(slots, unit_labels(name, fresh))
                for key, slot in zip(fresh, slots, strict=True):
                    lru.insert(key, slot)
                lru.touch(keys)
                new = [k for k in keys if k in lru and k not in self.unit_stored[name]]
                if new:
                    parts.append(PoolPart(name, component.unit_tokens, new, [lru.slot(k) for k in new]))
            first = stop
        if parts:
            flags = self.calls.write_units(_merge(parts))
            for part in _merge(parts):
                done = [k for k, ok in zip(part.hashes, flags.get(part.name, []), strict=False) if ok]
                self.unit_stored[part.name].update(done)
                self.units_written[part.name] += len(done)


def _merge(parts: list[PoolPart]) -> list[PoolPart]:
    """One part per pool (a v2 call takes each pool once per batch)."""
    merged: dict[str, PoolPart] = {}
    for part in parts:
        known = merged.get(part.name)
        if known is None:
            merged[part.name] = PoolPart(part.name, part.unit_tokens, list(part.hashes), list(part.units))
        else:
            merged[part.name] = PoolPart(
                part.name, part.unit_tokens, [*known.hashes, *part.hashes], [*known.units, *part.units]
            )
    return list(merged.values())
