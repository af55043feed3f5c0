"""The buffer-only pipeline: host memory stages transfers between a device pool and storage."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..contract import HiCacheStorage
from ..errors import ConfigError
from ..host_pool import HostKVPool
from .backup import BackupStage
from .buffer_cache import BufferPageCache
from .components import Component, KVComponent, PoolSet
from .config import PipelineConfig
from .copy_engine import CopyEngine
from .device_pool import DeviceKVPool
from .existence import StorageExistenceCache
from .lockstep import RankSync
from .metrics import PipelineMetrics
from .parts import StageParts
from .prefetch import PrefetchStage
from .sidecars import Sidecar, Sidecars
from .staging import HostStaging
from .storage_calls import MultiPoolCalls
from .types import Admission, BackupDecision, BackupResult, PrefetchRequest, PrefetchState, PrefetchStatus, Span

__all__ = ["BufferOnlyPipeline", "InvariantViolation"]


class InvariantViolation(AssertionError):
    """:meth:`BufferOnlyPipeline.check_invariants` found a leak, a wrong owner or a bad counter."""


class BufferOnlyPipeline:
    """Backs device pages up to storage and loads them back, staging through a host pool.

    Engine-facing calls: :meth:`enqueue_backup`, :meth:`prefetch`, :meth:`tick`,
    :meth:`poll_backups` / :meth:`poll_prefetches` / :meth:`prefetch_status`, :meth:`admit`,
    :meth:`abort`, :attr:`metrics`. Nothing happens between ticks; storage calls and copies run
    inside :meth:`tick` (and :meth:`admit` for the host→device copy). No engine call raises for a
    storage fault: faults degrade to misses and failed writes. Decisions depend only on the calls
    made, their order and storage's answers, so ranks fed the same events decide alike.

    ``device_pool`` is the device KV pool, or a :class:`~hicache_storage.pipeline.components.PoolSet`
    of the KV pool and sidecar components (SWA window KV, Mamba state, ...) that move with it.
    ``storage`` is any :class:`HiCacheStorage`, built by the caller (e.g. with
    :func:`hicache_storage.load_backend`): the pipeline knows only the contract. The host pools
    (``host_pool`` for KV, ``host_pools`` by sidecar name; by default ``host_to_device_ratio`` x
    each device pool) are registered with the backend, sidecars with ``register_mem_host_pool_v2``.
    Each host arena must fit two minimum transfers of its component, else :class:`ConfigError`.
    ``clock`` times the per-stage latency metrics; ``rank_sync`` is the collective lockstep ranks
    agree through (see :mod:`.lockstep`).
    """

    def __init__(
        self,
        config: PipelineConfig,
        device_pool: DeviceKVPool | PoolSet,
        storage: HiCacheStorage,
        *,
        host_pool: HostKVPool | None = None,
        host_pools: Mapping[str, Any] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        rank_sync: RankSync | None = None,
    ) -> None:
        if config.host_memory_mode != "buffer_only":
            raise ConfigError(
                "host_memory_mode",
                f"BufferOnlyPipeline implements host_memory_mode='buffer_only', got {config.host_memory_mode!r}",
            )
        config.require_storage(storage is not None)
        pools = PoolSet.of(device_pool)
        device_pool = pools.kv
        self.kv = KVComponent(device_pool, config.pool_name)
        if host_pool is None:
            host_pool = device_pool.host_pool(config.host_pages_for(device_pool.page_num))
        sidecar_hosts = {
            c.name: (host_pools or {}).get(c.name) or c.make_host_pool(c.host_units_for(config.ratio))
            for c in pools.sidecars
        }
        _check_arena(self.kv, host_pool)
        for component in pools.sidecars:
            _check_arena(component, sidecar_hosts[component.name])
        if storage.mem_pool_host is not host_pool:
            storage.register_mem_pool_host(host_pool)
        if pools.sidecars:
            for name, pool in sidecar_hosts.items():
                storage.register_mem_host_pool_v2(pool, name)
            storage.on_host_pools_registered()
        self.config = config
        self.pools = pools
        self.device_pool = device_pool
        self.host_pool = host_pool
        self.storage = storage
        self.clock = clock
        self.ticks = 0
        self.decisions: list[tuple[Any, ...]] = []
        self._metrics = PipelineMetrics()
        self.existence = StorageExistenceCache(config.existence_cache_entries, config.pool_name)
        self.buffer_cache = BufferPageCache() if config.retain_staged_pages else None
        self.staging = HostStaging(host_pool, self.buffer_cache, self._metrics)
        self.copier = CopyEngine(device_pool, host_pool)
        self.storage_calls = MultiPoolCalls(storage, host_pool.page_size, config.storage_batch_pages)
        cap = config.backlog_cap_for(device_pool.size) / device_pool.size
        self.sidecars = Sidecars(
            [Sidecar(c, sidecar_hosts[c.name], self._metrics, cap) for c in pools.sidecars],
            self.storage_calls,
            self.existence,
            self._metrics,
        )
        parts = StageParts(
            config,
            device_pool,
            self.staging,
            self.copier,
            self.storage_calls,
            self.existence,
            self._metrics,
            clock,
            self._log,
            self.sidecars,
            rank_sync,
        )
        self._backup = BackupStage(parts)
        self._prefetch = PrefetchStage(parts)

    # ------------------------------------------------------------ engine calls
    def enqueue_backup(self, span: Span) -> BackupDecision:
        """Offer a span for backup; see :class:`BackupDecision` for what can happen to it."""
        return self._backup.enqueue(span)

    def prefetch(self, request: PrefetchRequest) -> None:
        """Start loading the request's pages beyond its device prefix (looked up on the next tick)."""
        self._prefetch.submit(request)

    def tick(self) -> None:
        """Advance every operation one step: loads first, then backups within the write budget."""
        self.ticks += 1
        self._metrics.add("ticks")
        self._prefetch.run(self.ticks)
        if self._backup.fifo:  # (the budgets need the loads' holdings)
            self._backup.flush(self._prefetch.occupied_tokens(), self._prefetch.occupied_units())
        self._refresh_gauges()

    def admit(self, request_id: str, splice_point: int, device_pages: Sequence[int] | None = None) -> Admission:
        """Copy a staged prefetch to the device; see :meth:`PrefetchStage.admit` for the splice rules.

        ``device_pages``: destination page numbers the caller allocated (the first ones are filled);
        without them the pages are taken from the device pool with ``request_id`` as owner.
        """
        return self._prefetch.admit(request_id, splice_point, device_pages)

    def abort(self, request_id: str) -> bool:
        """Release everything a prefetch holds; ``False`` if it is not in progress."""
        return self._prefetch.abort(request_id)

    def poll_backups(self) -> list[BackupResult]:
        """Results of admitted spans finished since the last poll (their device slots are free to reuse)."""
        results, self._backup.results = self._backup.results, []
        return results

    def poll_prefetches(self) -> list[PrefetchStatus]:
        """Prefetches that became staged or finished since the last poll, in order."""
        events, self._prefetch.events = self._prefetch.events, []
        return events

    def prefetch_status(self, request_id: str) -> PrefetchStatus | None:
        """Where a prefetch stands (``None`` if unknown)."""
        return self._prefetch.status(request_id)

    @property
    def metrics(self) -> PipelineMetrics:
        """Counters, drops by gate, gauges and latencies (``as_dict()``, ``prometheus_text()``)."""
        self._refresh_gauges()
        return self._metrics

    @property
    def host_pools(self) -> dict[str, Any]:
        """Host pool of each component by name (the KV pool's under ``config.pool_name``)."""
        return {self.kv.name: self.host_pool, **{item.name: item.host_pool for item in self.sidecars.items}}

    @property
    def components(self) -> list[Component]:
        """The KV component, then the sidecars."""
        return [self.kv, *self.pools.sidecars]

    @property
    def backlog_tokens(self) -> int:
        """Tokens admitted for backup and not yet acknowledged."""
        return self._backup.backlog_tokens

    @property
    def idle(self) -> bool:
        """Whether no operation is pending and no prefetch is staged."""
        return not self._backup.fifo and not self._prefetch.busy and not self._prefetch.active

    def drain(self, max_ticks: int = 100_000, release_staged: bool = True) -> int:
        """Tick until idle; staged prefetches are released when ``release_staged``. Returns ticks run.

        Raises :class:`InvariantViolation` if the pipeline cannot become idle in ``max_ticks``.
        """
        for count in range(max_ticks + 1):
            if release_staged:
                self._prefetch.release_staged()
            self._prefetch.complete_copies(wait=True)
            if self.idle or (not release_staged and not self._backup.fifo and not self._prefetch.busy):
                self._refresh_gauges()
                return count
            self.tick()
        raise InvariantViolation(f"not idle after {max_ticks} ticks")

    def release_retained(self) -> int:
        """Free every unreferenced retained host page; returns how many."""
        return self.staging.release_retained()

    # ------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Raise :class:`InvariantViolation` unless host pages, references and counters add up.

        Every allocated host page is held by exactly one live operation (or retained), under that
        operation's owner tag; references on retained pages match their holders; the backlog equals
        the queued tokens; when idle, only retained pages are allocated and the backlog is zero.
        """
        expected: dict[int, object] = {}
        refs: Counter[str] = Counter()

        def hold(owner: object, hashes: list[str], pages: list[int], owned: list[bool]) -> None:
            for page_hash, page, own in zip(hashes, pages, owned, strict=True):
                if not own:
                    refs[page_hash] += 1
                    continue
                if page in expected:
                    raise InvariantViolation(f"host page {page} is held by {expected[page]!r} and {owner!r}")
                expected[page] = owner

        for load in self._prefetch.active.values():
            hold(load.owner, load.hashes, load.pages, load.owned)
        for copy in self._prefetch.copies:
            hold(copy.owner, copy.hashes, copy.pages, copy.owned)
        cache = self.buffer_cache
        retained = cache.pages() if cache is not None else {}
        for page_hash, page in retained.items():
            if page in expected:
                raise InvariantViolation(f"retained host page {page} is also held by {expected[page]!r}")
            expected[page] = self.staging.retained_owner.get(page, "<untagged retained page>")
            if cache is not None and cache.refcount(page_hash) != refs.get(page_hash, 0):
                raise InvariantViolation(
                    f"retained page {page_hash[:12]}: refcount {cache.refcount(page_hash)}, "
                    f"held {refs.get(page_hash, 0)}"
                )
        stray = set(refs) - set(retained)
        if stray:
            raise InvariantViolation(f"references on pages that are not retained: {sorted(stray)[:4]}")
        _check_owners("host pages", self.host_pool.owners(), expected)
        queued = self._backup.pending_tokens()
        if self._backup.backlog_tokens != queued or not 0 <= queued <= self._backup.cap_tokens:
            raise InvariantViolation(f"backlog_tokens={self._backup.backlog_tokens} but {queued} tokens are queued")
        if not self._backup.fifo and (self._backup.inflight_hashes or self._backup.inflight_ids):
            raise InvariantViolation("in-flight write records remain with no backup queued")
        if self.idle and self.host_pool.used_pages != len(retained):
            raise InvariantViolation(f"idle with {self.host_pool.used_pages} host pages used, {len(retained)} retained")
        staged = [load for load in self._prefetch.active.values() if load.state is PrefetchState.STAGED]
        if any(not load.pages for load in staged):
            raise InvariantViolation("a staged prefetch holds no pages")
        self._check_sidecars()

    def _check_sidecars(self) -> None:
        """Every sidecar host unit is held by one live operation under its owner tag; backlogs add up."""
        pending = self._backup.pending_units()
        holders = [(load.owner, load.sidecars) for load in self._prefetch.active.values()]
        holders += [(copy.owner, copy.sidecars) for copy in self._prefetch.copies]
        for item in self.sidecars.items:
            expected: dict[int, object] = {}
            for owner, parts in holders:
                for unit in parts[item.name].host if item.name in parts else ():
                    if unit in expected:
                        raise InvariantViolation(f"{item.name} unit {unit} is held by {expected[unit]!r} and {owner!r}")
                    expected[unit] = owner
            problem = item.staging.problems()
            if problem is not None:
                raise InvariantViolation(f"{item.name} host arena: {problem}")
            _check_owners(f"{item.name} host units", item.staging.owners, expected)
            if item.backlog != pending[item.name] or not 0 <= item.backlog <= item.cap:
                raise InvariantViolation(f"{item.name} backlog {item.backlog} units but {pending[item.name]} queued")
            if not self._backup.fifo and item.inflight:
                raise InvariantViolation(f"{item.name}: in-flight write records remain with no backup queued")

    # ------------------------------------------------------------ internals
    def _log(self, *entry: Any) -> None:
        if self.config.record_decisions:
            self.decisions.append((self.ticks, *entry))

    def _refresh_gauges(self) -> None:
        gauges = self._metrics.gauges
        gauges["backlog_tokens"] = self._backup.backlog_tokens
        gauges["host_used_pages"] = self.host_pool.used_pages
        active = self._prefetch.active.values()
        gauges["staged_prefetches"] = sum(1 for load in active if load.state is PrefetchState.STAGED)
        gauges["parked_prefetches"] = len(self._prefetch.parked)
        gauges["retained_pages"] = len(self.buffer_cache) if self.buffer_cache is not None else 0
        self.sidecars.refresh_gauges()

    def __repr__(self) -> str:
        sidecars = ", ".join(item.name for item in self.sidecars.items)
        return (
            f"BufferOnlyPipeline(device={self.device_pool!r}, host={self.host_pool!r}, "
            f"sidecars=[{sidecars}], storage={type(self.storage).__name__}, backlog={self.backlog_tokens} tokens)"
        )


def _check_arena(component: Component, host_pool: Any) -> None:
    """Raise :class:`ConfigError` unless ``host_pool`` fits two minimum transfers of ``component``."""
    units = int(host_pool.size) // component.unit_tokens
    need = 2 * component.min_transfer_units()
    if units < need:
        size = component.unit_bytes
        raise ConfigError(
            f"component {component.name!r}",
            f"host arena of {units} units ({units * size:,} bytes) cannot fit two minimum transfers of "
            f"{component.min_transfer_units()} units ({component.min_transfer_units() * size:,} bytes each); "
            "raise host_to_device_ratio or pass a larger host pool",
        )


def _check_owners(what: str, actual: Mapping[int, object], expected: Mapping[int, object]) -> None:
    """Raise :class:`InvariantViolation` naming the units of ``what`` whose owner is not the expected one."""
    if actual == expected:
        return
    leaked = sorted(set(actual) - set(expected))
    lost = sorted(set(expected) - set(actual))
    wrong = sorted(u for u in set(actual) & set(expected) if actual[u] != expected[u])
    raise InvariantViolation(f"{what} leaked {leaked[:8]}, freed while held {lost[:8]}, wrong owner {wrong[:8]}")
