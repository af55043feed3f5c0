"""Backup path: admission gates, the FIFO of intents, and the per-tick flush to storage.

The intents a tick flushes are written together: their KV pages in one ``batch_set_v1`` per
batch of pages, then settled one by one as if each had been written alone. With sidecar
components, each intent also carries, per sidecar, the units its component's rule asks for (SWA:
the span's trailing window; Mamba: the state at the span's end). They are staged with the KV
pages of the same tick and the flush's units are written in one ``batch_set_v2`` per batch before
the KV pages go out, as SGLang's hybrid controller orders them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..errors import InvalidRequestError
from .device_pool import tokens_to_pages
from .inflight import InFlight
from .parts import Stage, StageParts
from .sidecars import Units
from .types import BackupDecision, BackupResult, Span

__all__ = ["BackupStage"]


@dataclass
class _Intent:
    span: Span
    hashes: list[str]
    device_pages: list[int]  # KV pages to write ([] when every KV page is already believed stored)
    parent_hash: str | None  # resolved at admission; None only for a root span
    admitted_at: float
    sidecars: dict[str, Units] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return len(self.device_pages)


class BackupStage(Stage):
    """Admits spans through the gates (existence belief, parent coverage, backlog cap, oversize) and
    writes admitted ones in FIFO order within each tick's write budget.

    ``backlog_tokens`` is the number of KV tokens admitted and not yet acknowledged; it is never
    above ``cap_tokens`` (each sidecar keeps its own backlog in units, capped the same way).
    Between ticks no host page is held by a backup.
    """

    def __init__(self, parts: StageParts) -> None:
        super().__init__(parts)
        device_pool = self.device_pool
        self.cap_tokens = self.config.backlog_cap_for(device_pool.size)
        host_tokens = self.staging.pool.size
        #: Most tokens one tick may stage: what the staging pool could ever hold for writes.
        self.max_budget_tokens = max(int(0.2 * host_tokens), host_tokens - host_tokens // 10)
        self.fifo: deque[_Intent] = deque()
        self.inflight_hashes = InFlight()
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
        sidecars = self._sidecar_units(span, hashes) if self.sidecars else {}
        tokens = len(hashes) * self.page_size
        self.metrics.add("backup_offered_tokens", tokens)
        decision, component, kv_needed = self._decide(span, hashes, tokens, sidecars)
        if component == "kv":
            self.log("backup", span.span_id, decision.value)
        else:
            self.log("backup", span.span_id, decision.value, component)
        if decision is BackupDecision.ADMITTED:
            parent = span.parent_hash
            if parent is None and span.parent_id is not None:
                parent = self.inflight_ids[span.parent_id]
            intent = _Intent(span, hashes, device_pages if kv_needed else [], parent, self.clock(), sidecars)
            self.fifo.append(intent)
            if kv_needed:
                self.inflight_hashes.add(intent.hashes)
            self.inflight_ids[span.span_id] = hashes[-1]
            self.backlog_tokens += intent.pages * self.page_size
            for name, units in sidecars.items():
                item = self.sidecars.by_name[name]
                item.inflight.add(units.hashes)
                item.backlog += len(units)
            self.metrics.add("backup_admitted_tokens", tokens)
        elif decision is BackupDecision.SKIPPED:
            self.metrics.add("backup_skipped_tokens", tokens)
        elif decision is BackupDecision.NOT_SELECTED:
            self.metrics.add("backup_not_selected_tokens", tokens)
        else:
            self.metrics.drop(decision.gate or "?", tokens, component)
        return decision

    def _sidecar_units(self, span: Span, hashes: list[str]) -> dict[str, Units]:
        """Per sidecar the span offers: the units its rule writes that are not believed stored or in flight."""
        found: dict[str, Units] = {}
        offered = span.sidecars or {}
        if not offered.keys() <= self.sidecars.by_name.keys():
            unknown = set(offered) - set(self.sidecars.by_name)
            raise InvalidRequestError(f"span {span.span_id!r}: unknown sidecar components {sorted(unknown)}")
        for item in self.sidecars.items:
            indices = offered.get(item.name)
            if indices is None:
                continue
            wanted = [hashes[position] for position in item.component.backup_positions(0, len(hashes))]
            device = item.component.device_units(indices, len(wanted), f"span {span.span_id!r}")
            keep = [
                i
                for i, page_hash in enumerate(wanted)
                if page_hash not in item.inflight and not self.existence.contains(item.name, page_hash)
            ]
            item.row["units_offered"] += len(wanted)
            item.row["units_skipped"] += len(wanted) - len(keep)
            if len(keep) == len(wanted):
                found[item.name] = Units(wanted, device)
            elif keep:
                found[item.name] = Units([wanted[i] for i in keep], [device[i] for i in keep])
        return found

    def _kv_covered(self, hashes: list[str]) -> bool:
        return self.existence.covers_all(self.config.pool_name, hashes, self.inflight_hashes)

    def _decide(
        self, span: Span, hashes: list[str], tokens: int, sidecars: dict[str, Units]
    ) -> tuple[BackupDecision, str, bool]:
        """The decision, the component whose gate made it, and whether any KV page must be written."""
        config = self.config
        if config.write_policy == "write_through_selective" and span.hit_count < config.write_through_threshold:
            return BackupDecision.NOT_SELECTED, "kv", False
        kv_needed = not self._kv_covered(hashes)
        if not kv_needed and not sidecars:
            return BackupDecision.SKIPPED, "kv", False
        if kv_needed and not self._parent_covered(span):
            return BackupDecision.DROPPED_PARENT, "kv", kv_needed
        if kv_needed and self.backlog_tokens + tokens > self.cap_tokens:
            return BackupDecision.DROPPED_BACKLOG, "kv", kv_needed
        for name, units in sidecars.items():
            item = self.sidecars.by_name[name]
            if item.backlog + len(units) > item.cap:
                return BackupDecision.DROPPED_BACKLOG, name, kv_needed
        if kv_needed and tokens > self.max_budget_tokens:
            return BackupDecision.DROPPED_OVERSIZE, "kv", kv_needed
        for name, units in sidecars.items():
            if len(units) > self.sidecars.by_name[name].max_budget:
                return BackupDecision.DROPPED_OVERSIZE, name, kv_needed
        return BackupDecision.ADMITTED, "kv", kv_needed

    def _parent_covered(self, span: Span) -> bool:
        if span.is_root:
            return True
        if span.parent_hash is None:
            return span.parent_id in self.inflight_ids
        return self._hash_covered(span.parent_hash)

    def _hash_covered(self, page_hash: str) -> bool:
        return page_hash in self.inflight_hashes or self.existence.contains(self.config.pool_name, page_hash)

    # ------------------------------------------------------------ flush
    def budget_tokens(self, prefetch_occupied_tokens: int) -> int:
        """This tick's write budget: ``max(0.2*pool, pool - prefetch_occupied - pool//10)`` tokens."""
        pool = self.staging.pool.size
        return max(int(0.2 * pool), pool - prefetch_occupied_tokens - pool // 10)

    def flush(self, prefetch_occupied_tokens: int, prefetch_occupied_units: dict[str, int] | None = None) -> int:
        """Stage and write FIFO intents within the budget; returns the number of spans finished."""
        budget = self.budget_tokens(prefetch_occupied_tokens)
        occupied = prefetch_occupied_units or {}
        unit_budget = {item.name: item.budget(occupied.get(item.name, 0)) for item in self.sidecars.items}
        batch: list[tuple[_Intent, list[int]]] = []
        used = 0
        while self.fifo:
            intent = self.fifo[0]
            tokens = intent.pages * self.page_size
            if used + tokens > budget or any(len(u) > unit_budget[n] for n, u in intent.sidecars.items()):
                break
            host_pages = self.staging.alloc(intent.pages, ("backup", intent.span.span_id))
            if host_pages is None:
                break
            if intent.sidecars and not self.sidecars.alloc(intent.sidecars, ("backup", intent.span.span_id)):
                self.staging.release(intent.hashes[: intent.pages], host_pages, [True] * intent.pages, 0)
                break
            self.fifo.popleft()
            used += tokens
            for name, units in intent.sidecars.items():
                unit_budget[name] -= len(units)
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
        self.sidecars.to_host([intent.sidecars for intent, _ in batch])
        self.metrics.observe("device_to_host", self.clock() - now)
        self.metrics.add("bytes_device_to_host", used // self.page_size * self.page_bytes)
        self._write(batch)
        return len(batch)

    def _write(self, batch: list[tuple[_Intent, list[int]]]) -> None:
        """Write the batch's KV pages and sidecar units together, then settle each intent in FIFO order.

        Every sidecar unit goes out in one ``batch_set_v2`` per ``storage_batch_pages`` units, then
        every KV page in one ``batch_set_v1`` per ``storage_batch_pages`` pages. An intent is left
        out when its parent would be uncovered even if every earlier write of the batch succeeded.
        Settling runs the checks and records of writing the intents one by one, in the same order
        and on the same answers: an intent whose parent's write failed in the same call is dropped
        (its pages were sent but are not believed) and each intent believes its leading stored run.
        """
        sent = self._sendable(batch)
        chosen = [intent for (intent, _), send in zip(batch, sent, strict=True) if send]
        begin = self.clock()
        side = iter(self.sidecars.write([i.sidecars for i in chosen if i.sidecars]))
        hashes = [h for i in chosen if i.pages for h in i.hashes[: i.pages]]
        pages = [p for (_, host), send in zip(batch, sent, strict=True) if send for p in host]
        kv_flags = self.storage.write_each(hashes, pages) if hashes else []
        self.metrics.observe("write", self.clock() - begin)
        offset = 0
        for (intent, host_pages), send in zip(batch, sent, strict=True):
            if not send:  # its parent is uncovered now too (and checking it would change no belief)
                self._drop_child(intent, host_pages)
                continue
            side_flags = next(side) if intent.sidecars else {}
            self._settle(intent, host_pages, kv_flags[offset : offset + intent.pages], side_flags)
            offset += intent.pages

    def _sendable(self, batch: list[tuple[_Intent, list[int]]]) -> list[bool]:
        """Per intent: whether its parent is covered if every earlier write of the batch succeeds.

        Reads beliefs without refreshing them, so the settling checks see the recency they would
        have seen had the intents been written one by one.
        """
        pool = self.config.pool_name
        written: set[str] = set()  # KV pages sent by earlier intents of the batch
        released: dict[str, int] = {}  # in-flight holds of earlier intents left out
        sent: list[bool] = []
        last = len(batch) - 1
        for index, (intent, _) in enumerate(batch):
            # What an intent sends or leaves out matters only to the intents after it.
            hashes = intent.hashes[: intent.pages] if intent.pages and index < last else []
            parent = intent.parent_hash
            send = (
                not intent.pages
                or parent is None
                or parent in written
                or self.existence.holds(pool, parent)
                or self.inflight_hashes.count(parent) > released.get(parent, 0)
            )
            sent.append(send)
            if send:
                written.update(hashes)
            else:
                for page_hash in hashes:
                    released[page_hash] = released.get(page_hash, 0) + 1
        return sent

    def _settle(
        self, intent: _Intent, host_pages: list[int], kv_flags: list[bool], side_flags: dict[str, list[bool]]
    ) -> None:
        """Finish one intent of a written batch from its share of the calls' answers."""
        if intent.pages and intent.parent_hash is not None and not self._hash_covered(intent.parent_hash):
            self._drop_child(intent, host_pages)  # the parent's write failed in the same call
            return
        hashes = intent.hashes[: intent.pages] if intent.pages else []
        side = self.sidecars.settle(intent.sidecars, side_flags) if intent.sidecars else {}
        if intent.pages:
            stored = kv_flags.index(False) if False in kv_flags else len(kv_flags)
            self.existence.record(self.config.pool_name, hashes[:stored])
        else:  # every KV page was already believed stored: only sidecar units were written
            stored = len(intent.hashes)
        written = stored if intent.pages else 0
        self.metrics.add("bytes_written", written * self.page_bytes)
        self.metrics.add("backup_stored_tokens", written * self.page_size)
        self.metrics.add("backup_failed_tokens", (len(hashes) - written) * self.page_size)
        self.staging.release(hashes, host_pages, [True] * len(hashes), written)
        self.sidecars.release(intent.sidecars)
        complete = all(side.get(name, 0) == len(units) for name, units in intent.sidecars.items())
        if stored == len(intent.hashes) and complete:
            status = "stored"
        elif stored or any(side.values()):
            status = "partial"
        else:
            status = "failed"
        self._finish(intent, status, stored, side)

    def _drop_child(self, intent: _Intent, host_pages: list[int]) -> None:
        """Release an intent whose parent's write failed after it was admitted: it would hang off a hole."""
        self.staging.release(intent.hashes[: intent.pages], host_pages, [True] * intent.pages, 0)
        self.sidecars.release(intent.sidecars)
        self.metrics.drop("parent", intent.pages * self.page_size)
        self._finish(intent, "dropped_parent", 0, {})

    def _finish(self, intent: _Intent, status: str, stored: int, side: dict[str, int]) -> None:
        if intent.pages:
            self.inflight_hashes.remove(intent.hashes[: intent.pages])
        if self.inflight_ids.get(intent.span.span_id) == intent.hashes[-1]:
            del self.inflight_ids[intent.span.span_id]
        self.backlog_tokens -= intent.pages * self.page_size
        for name, units in intent.sidecars.items():
            item = self.sidecars.by_name[name]
            item.inflight.remove(units.hashes)
            item.backlog -= len(units)
        self.results.append(BackupResult(intent.span.span_id, status, stored, len(intent.hashes), dict(side)))
        self.log("backup_done", intent.span.span_id, status, stored, *sorted(side.items()))

    def pending_tokens(self) -> int:
        """Tokens of intents in the FIFO (equals ``backlog_tokens`` between ticks)."""
        return sum(intent.pages for intent in self.fifo) * self.page_size

    def pending_units(self) -> dict[str, int]:
        """Sidecar units of intents in the FIFO (equal each sidecar's backlog between ticks)."""
        out = dict.fromkeys(self.sidecars.by_name, 0)
        for intent in self.fifo:
            for name, units in intent.sidecars.items():
                out[name] += len(units)
        return out
