"""Backup path: admission gates, the FIFO of intents, and the per-tick flush to storage."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..errors import InvalidRequestError
from .device_pool import tokens_to_pages
from .parts import Stage, StageParts
from .types import BackupDecision, BackupResult, Span

__all__ = ["BackupStage"]


@dataclass
class _Intent:
    span: Span
    hashes: list[str]
    device_pages: list[int]
    parent_hash: str | None  # resolved at admission; None only for a root span
    admitted_at: float

    @property
    def pages(self) -> int:
        return len(self.device_pages)


class BackupStage(Stage):
    """Admits spans through the gates (existence belief, parent coverage, backlog cap, oversize) and
    writes admitted ones in FIFO order within each tick's write budget.

    ``backlog_tokens`` is the number of tokens admitted and not yet acknowledged; it is never above
    ``cap_tokens``. Between ticks no host page is held by a backup.
    """

    def __init__(self, parts: StageParts) -> None:
        super().__init__(parts)
        device_pool = self.device_pool
        self.cap_tokens = self.config.backlog_cap_for(device_pool.size)
        host_tokens = self.staging.pool.size
        #: Most tokens one tick may stage: what the staging pool could ever hold for writes.
        self.max_budget_tokens = max(int(0.2 * host_tokens), host_tokens - host_tokens // 10)
        self.fifo: deque[_Intent] = deque()
        self.inflight_hashes: dict[str, int] = {}
        self.inflight_ids: dict[int | str, str] = {}  # span id -> its last page hash
        self.backlog_tokens = 0
        self.results: list[BackupResult] = []

    # ------------------------------------------------------------ admission
    def enqueue(self, span: Span) -> BackupDecision:
        """Run the gates; an admitted span waits in the FIFO (its device slots must stay valid)."""
        hashes = list(span.hashes)
        device_pages = tokens_to_pages(span.device_indices, self.page_size, self.device_pool.size)
        if len(device_pages) != len(hashes):
            raise InvalidRequestError(
                f"span {span.span_id!r}: {len(hashes)} hashes but {len(device_pages)} device pages"
            )
        tokens = len(hashes) * self.page_size
        self.metrics.add("backup_offered_tokens", tokens)
        decision = self._decide(span, hashes, tokens)
        self.log("backup", span.span_id, decision.value)
        if decision is BackupDecision.ADMITTED:
            parent = span.parent_hash
            if parent is None and span.parent_id is not None:
                parent = self.inflight_ids[span.parent_id]
            self.fifo.append(_Intent(span, hashes, device_pages, parent, self.clock()))
            self._hold(hashes, +1)
            self.inflight_ids[span.span_id] = hashes[-1]
            self.backlog_tokens += tokens
            self.metrics.add("backup_admitted_tokens", tokens)
        elif decision is BackupDecision.SKIPPED:
            self.metrics.add("backup_skipped_tokens", tokens)
        elif decision is BackupDecision.NOT_SELECTED:
            self.metrics.add("backup_not_selected_tokens", tokens)
        else:
            self.metrics.drop(decision.gate or "?", tokens)
        return decision

    def _decide(self, span: Span, hashes: list[str], tokens: int) -> BackupDecision:
        config = self.config
        if config.write_policy == "write_through_selective" and span.hit_count < config.write_through_threshold:
            return BackupDecision.NOT_SELECTED
        if self.existence.covers_all(config.pool_name, hashes, self.inflight_hashes):
            return BackupDecision.SKIPPED
        if not self._parent_covered(span):
            return BackupDecision.DROPPED_PARENT
        if self.backlog_tokens + tokens > self.cap_tokens:
            return BackupDecision.DROPPED_BACKLOG
        if tokens > self.max_budget_tokens:
            return BackupDecision.DROPPED_OVERSIZE
        return BackupDecision.ADMITTED

    def _parent_covered(self, span: Span) -> bool:
        if span.is_root:
            return True
        if span.parent_hash is None:
            return span.parent_id in self.inflight_ids
        return self._hash_covered(span.parent_hash)

    def _hash_covered(self, page_hash: str) -> bool:
        return page_hash in self.inflight_hashes or self.existence.contains(self.config.pool_name, page_hash)

    def _hold(self, hashes: list[str], delta: int) -> None:
        for page_hash in hashes:
            count = self.inflight_hashes.get(page_hash, 0) + delta
            if count:
                self.inflight_hashes[page_hash] = count
            else:
                del self.inflight_hashes[page_hash]

    # ------------------------------------------------------------ flush
    def budget_tokens(self, prefetch_occupied_tokens: int) -> int:
        """This tick's write budget: ``max(0.2*pool, pool - prefetch_occupied - pool//10)`` tokens."""
        pool = self.staging.pool.size
        return max(int(0.2 * pool), pool - prefetch_occupied_tokens - pool // 10)

    def flush(self, prefetch_occupied_tokens: int) -> int:
        """Stage and write FIFO intents within the budget; returns the number of spans finished."""
        budget = self.budget_tokens(prefetch_occupied_tokens)
        batch: list[tuple[_Intent, list[int]]] = []
        used = 0
        while self.fifo:
            intent = self.fifo[0]
            tokens = intent.pages * self.page_size
            if used + tokens > budget:
                break
            host_pages = self.staging.alloc(intent.pages, ("backup", intent.span.span_id))
            if host_pages is None:
                break
            self.fifo.popleft()
            used += tokens
            batch.append((intent, host_pages))
        if not batch:
            return 0
        now = self.clock()
        for intent, _ in batch:
            self.metrics.observe("backup_queue", now - intent.admitted_at)
        handle = self.copier.device_to_host(
            [p for intent, _ in batch for p in intent.device_pages], [p for _, pages in batch for p in pages]
        )
        handle.wait()
        self.metrics.observe("device_to_host", self.clock() - now)
        self.metrics.add("bytes_device_to_host", used // self.page_size * self.page_bytes)
        for intent, host_pages in batch:
            self._write(intent, host_pages)
        return len(batch)

    def _write(self, intent: _Intent, host_pages: list[int]) -> None:
        hashes = intent.hashes
        owned = [True] * len(hashes)
        if intent.parent_hash is not None and not self._hash_covered(intent.parent_hash):
            # The parent's write failed after this span was admitted: writing it would leave a hole.
            self.staging.release(hashes, host_pages, owned, 0)
            self.metrics.drop("parent", intent.pages * self.page_size)
            self._finish(intent, "dropped_parent", 0)
            return
        begin = self.clock()
        stored = self.storage.write_leading(hashes, host_pages)
        self.metrics.observe("write", self.clock() - begin)
        self.existence.record(self.config.pool_name, hashes[:stored])
        self.metrics.add("bytes_written", stored * self.page_bytes)
        self.metrics.add("backup_stored_tokens", stored * self.page_size)
        self.metrics.add("backup_failed_tokens", (len(hashes) - stored) * self.page_size)
        self.staging.release(hashes, host_pages, owned, stored)
        status = "stored" if stored == len(hashes) else ("partial" if stored else "failed")
        self._finish(intent, status, stored)

    def _finish(self, intent: _Intent, status: str, stored: int) -> None:
        self._hold(intent.hashes, -1)
        if self.inflight_ids.get(intent.span.span_id) == intent.hashes[-1]:
            del self.inflight_ids[intent.span.span_id]
        self.backlog_tokens -= intent.pages * self.page_size
        self.results.append(BackupResult(intent.span.span_id, status, stored, intent.pages))
        self.log("backup_done", intent.span.span_id, status, stored)

    def pending_tokens(self) -> int:
        """Tokens of intents in the FIFO (equals ``backlog_tokens`` between ticks)."""
        return sum(intent.pages for intent in self.fifo) * self.page_size
