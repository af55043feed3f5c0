"""The buffer-only pipeline: host memory stages transfers between a device pool and storage."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..config import HiCacheStorageConfig, make_config
from ..errors import ConfigError
from ..host_pool import HostKVPool
from ..interface import HiCacheStorage
from .backup import BackupStage
from .buffer_cache import BufferPageCache
from .config import PipelineConfig
from .copy_engine import CopyEngine
from .device_pool import DeviceKVPool
from .existence import StorageExistenceCache
from .metrics import PipelineMetrics
from .parts import StageParts
from .prefetch import PrefetchStage
from .staging import HostStaging
from .storage_calls import StorageCalls
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

    ``storage`` is any :class:`HiCacheStorage`; without one, ``config.storage_backend`` is loaded
    from the registry with ``storage_config`` (default: :func:`make_config` with
    ``config.storage_options``). The host pool is registered with the backend. ``clock`` times
    the per-stage latency metrics.
    """

    def __init__(
        self,
        config: PipelineConfig,
        device_pool: DeviceKVPool,
        storage: HiCacheStorage | None = None,
        *,
        host_pool: HostKVPool | None = None,
        storage_config: HiCacheStorageConfig | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if config.host_memory_mode != "buffer_only":
            raise ConfigError(
                "host_memory_mode",
                f"BufferOnlyPipeline implements host_memory_mode='buffer_only', got {config.host_memory_mode!r}",
            )
        config.require_storage(storage is not None or config.storage_backend is not None)
        if storage is None:
            from ..registry import load_backend

            assert config.storage_backend is not None
            storage = load_backend(
                config.storage_backend, storage_config or make_config(extra_config=config.storage_options)
            )
        if host_pool is None:
            host_pool = device_pool.host_pool(config.host_pages_for(device_pool.page_num))
        if storage.mem_pool_host is not host_pool:
            storage.register_mem_pool_host(host_pool)
        self.config = config
        self.device_pool = device_pool
        self.host_pool = host_pool
        self.storage = storage
        self.clock = clock
        self.ticks = 0
        self.decisions: list[tuple[Any, ...]] = []
        self._metrics = PipelineMetrics()
        self.existence = StorageExistenceCache(config.existence_cache_entries)
        self.buffer_cache = BufferPageCache() if config.retain_staged_pages else None
        self.staging = HostStaging(host_pool, self.buffer_cache, self._metrics)
        self.copier = CopyEngine(device_pool, host_pool)
        self.storage_calls = StorageCalls(storage, host_pool.page_size, config.storage_batch_pages)
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
        self._backup.flush(self._prefetch.occupied_tokens())
        self._refresh_gauges()

    def admit(self, request_id: str, splice_point: int) -> Admission:
        """Copy a staged prefetch to the device; see :meth:`PrefetchStage.admit` for the splice rules."""
        return self._prefetch.admit(request_id, splice_point)

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
        actual = self.host_pool.owners()
        if actual != expected:
            leaked = sorted(set(actual) - set(expected))
            lost = sorted(set(expected) - set(actual))
            wrong = sorted(p for p in set(actual) & set(expected) if actual[p] != expected[p])
            raise InvariantViolation(
                f"host pages leaked {leaked[:8]}, freed while held {lost[:8]}, wrong owner {wrong[:8]}"
            )
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

    def __repr__(self) -> str:
        return (
            f"BufferOnlyPipeline(device={self.device_pool!r}, host={self.host_pool!r}, "
            f"storage={type(self.storage).__name__}, backlog={self.backlog_tokens} tokens)"
        )
