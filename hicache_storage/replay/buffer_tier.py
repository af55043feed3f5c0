"""Mode ``buffer_only``: the reference :class:`~hicache_storage.pipeline.BufferOnlyPipeline` as the host tier.

Loads go through ``prefetch`` → ``tick`` → ``admit``; backups through ``enqueue_backup`` → ``tick``.
The replay is sequential, so each operation is ticked to completion before the request ends. The
device cache owns every device KV page; ``admit`` fills the device slots the cache reserved for the
request (page numbers, as the replay keeps them), and the admitted pages stay in the device cache.

With a hybrid model the pipeline gets the model's sidecar components. Their device pools hold
units only while an operation needs them: a backup's units are filled with their expected
content, offered with the span and freed once it is written; an admission's units are checked
byte for byte and freed (the device keeps checkpoints as bookkeeping, see :mod:`.engine`). The
computed pages are offered as one span per checkpoint, so every span ends where a state was kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from ..contract import HiCacheStorage
from ..pipeline import (
    BufferOnlyPipeline,
    Component,
    DeviceKVPool,
    PipelineConfig,
    PoolSet,
    PrefetchRequest,
    PrefetchState,
    Span,
    pages_to_tokens,
)
from .kvdata import PageView, matching_prefix
from .sidecars import UnitView, span_ends, unit_labels
from .tiers import LoadOutcome

__all__ = ["BufferOnlyTier"]

_MAX_TICKS = 10_000


class BufferOnlyTier:
    """Host memory as staging only, driven through the reference pipeline."""

    def __init__(
        self,
        device: PageView,
        device_pool: DeviceKVPool,
        backend: HiCacheStorage,
        *,
        host_ratio: float,
        components: Sequence[Component] = (),
        checkpoint_pages: int = 0,
    ) -> None:
        self.device = device
        self.device_pool = device_pool
        config = PipelineConfig(host_memory_mode="buffer_only", host_to_device_ratio=host_ratio)
        self.components = list(components)
        self.pipeline = BufferOnlyPipeline(config, PoolSet(device_pool, self.components), backend)
        self.host_pool_pages = self.pipeline.host_pool.page_num
        self.host_units = {item.name: item.staging.units for item in self.pipeline.sidecars.items}
        self.views = {c.name: UnitView(c.device) for c in self.components}
        self.checkpoint_pages = checkpoint_pages
        self.gate_drops: Counter[str] = Counter()
        self.corrupt_pages = 0
        self.corrupt_units = 0
        self._requests = 0
        self._spans = 0

    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        """Prefetch the pages after the device prefix and admit them into the first ``device_slots``."""
        page_size = self.device_pool.page_size
        wanted = hashes[: start + len(device_slots)]
        if start >= len(wanted):
            return LoadOutcome()
        self._requests += 1
        request_id = f"r{self._requests}"
        self.pipeline.prefetch(PrefetchRequest(request_id, wanted, splice_point=start * page_size))
        for _ in range(_MAX_TICKS):
            self.pipeline.tick()
            status = self.pipeline.prefetch_status(request_id)
            if status is None or status.state not in (PrefetchState.QUERYING, PrefetchState.PARKED):
                break
        status = self.pipeline.prefetch_status(request_id)
        if status is None or status.state is not PrefetchState.STAGED:
            self.pipeline.abort(request_id)
            return LoadOutcome(kv_pages=status.kv_pages if status is not None else 0)
        admission = self.pipeline.admit(request_id, start * page_size, device_slots)
        pages = device_slots[: admission.pages]
        good = matching_prefix(self.device, pages, list(admission.hashes))
        self.corrupt_pages += len(pages) - good
        outcome = LoadOutcome(kv_pages=status.kv_pages)
        if self.components and not self._check_units(hashes, start, start + len(pages), admission.sidecars, outcome):
            return outcome  # a sidecar unit came back wrong: the whole prefix is recomputed
        outcome.storage_pages = good
        return outcome

    def _check_units(
        self, hashes: list[str], start: int, end: int, units: dict[str, torch.Tensor], outcome: LoadOutcome
    ) -> bool:
        """Check every admitted sidecar unit byte for byte, then free it; ``False`` if any is wrong or missing."""
        ok = bool(units) and end > start
        for component in self.components:
            tokens = units.get(component.name)
            if tokens is None:
                ok = False
                continue
            slots = component.unit_numbers(tokens)
            labels = unit_labels(component.name, [hashes[p] for p in component.restore_positions(start, end)])
            good = self.views[component.name].matching(slots, labels) if len(slots) == len(labels) else 0
            self.corrupt_units += len(slots) - good
            ok = ok and good == len(labels)
            key = f"{component.name}/storage"
            outcome.units[key] = outcome.units.get(key, 0) + len(slots)
            component.device.free(tokens)
        return ok

    @property
    def units_written(self) -> dict[str, int]:
        """Sidecar units acknowledged stored, per component."""
        rows = self.pipeline.metrics.as_dict()["components"]
        return {name: int(row["units_written"]) for name, row in rows.items()}

    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        """Offer the computed pages, one span per checkpoint, and tick until every result is polled."""
        pending: dict[int, dict[str, torch.Tensor]] = {}
        first = begin
        for stop in span_ends(begin, end, self.checkpoint_pages):
            self._spans += 1
            sidecars = self._sidecar_units(hashes, first, stop)
            if sidecars is None:  # device units are short: finish what is in flight, then try again
                self._drain(pending)
                sidecars = self._sidecar_units(hashes, first, stop) or {}
            span = Span(
                span_id=self._spans,
                hashes=hashes[first:stop],
                device_indices=pages_to_tokens(device_slots[first - begin : stop - begin], self.device_pool.page_size),
                parent_hash=hashes[first - 1] if first > 0 else None,
                sidecars=sidecars,
            )
            decision = self.pipeline.enqueue_backup(span)
            if decision.value == "admitted":
                pending[self._spans] = sidecars
            else:
                self.gate_drops[decision.gate or decision.value] += stop - first
                self._free_units(sidecars)
            first = stop
        self._drain(pending)

    def _sidecar_units(self, hashes: list[str], begin: int, end: int) -> dict[str, torch.Tensor] | None:
        """Device units of each sidecar for the span ``[begin, end)``, filled; ``None`` if a pool is short."""
        taken: dict[str, torch.Tensor] = {}
        for component in self.components:
            positions = list(component.backup_positions(begin, end))
            tokens = component.device.alloc(len(positions) * component.unit_tokens, owner="engine")
            if tokens is None:
                self._free_units(taken)
                return None
            slots = component.unit_numbers(tokens)
            self.views[component.name].fill(slots, unit_labels(component.name, [hashes[p] for p in positions]))
            taken[component.name] = tokens
        return taken

    def _free_units(self, units: dict[str, torch.Tensor]) -> None:
        for component in self.components:
            tokens = units.get(component.name)
            if tokens is not None:
                component.device.free(tokens)

    def _drain(self, pending: dict[int, dict[str, torch.Tensor]]) -> None:
        for _ in range(_MAX_TICKS):
            if not pending:
                return
            self.pipeline.tick()
            for result in self.pipeline.poll_backups():
                units = pending.pop(int(result.span_id), None)
                if units is not None:
                    self._free_units(units)
        raise RuntimeError(f"backup spans {sorted(pending)[:4]} did not finish in {_MAX_TICKS} ticks")
