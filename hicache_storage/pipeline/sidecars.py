"""The sidecar components of one pipeline and what the stages do with all of them together.

Per sidecar: its host pool and owner-tagged units, its copy engine, its backlog and in-flight
writes, its write budget. The stages hand over one :class:`Units` per sidecar of an operation
(a backup intent, a prefetch, a copy) and call :class:`Sidecars` to allocate them all or none,
copy them, write or read them in one v2 call, record beliefs and release them. Which positions a
component needs is the component's rule (``components/``), never decided here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .components.base import Component, UnitStaging
from .copy_engine import CopyHandle
from .existence import StorageExistenceCache
from .inflight import InFlight
from .metrics import PipelineMetrics
from .storage_calls import MultiPoolCalls, PoolPart

__all__ = ["Sidecar", "Sidecars", "Units"]


@dataclass
class Units:
    """One sidecar's share of an operation: the KV page hashes of its positions, device and host units."""

    hashes: list[str]
    device: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.hashes)


class Sidecar:
    """Run-time state of one sidecar component in a pipeline."""

    def __init__(self, component: Component, host_pool: Any, metrics: PipelineMetrics, cap_ratio: float) -> None:
        self.component = component
        self.name = component.name
        self.host_pool = host_pool
        self.staging = UnitStaging(component, host_pool)
        self.copier = component.copier(host_pool)
        self.unit_bytes = component.unit_bytes
        self.unit_tokens = component.unit_tokens
        units = self.staging.units
        #: Most units one tick may stage for backups (what the host pool could ever hold for writes).
        self.max_budget = max(int(0.2 * units), units - units // 10)
        #: Backlog cap in units: ``cap_ratio`` x the device pool's units (the KV cap's ratio to KV tokens).
        self.cap = max(1, math.ceil(cap_ratio * component.device.page_num))
        self.backlog = 0
        #: Unit hashes with writes in flight.
        self.inflight = InFlight()
        self.row = metrics.add_component(self.name)

    def budget(self, occupied: int) -> int:
        """This tick's write budget in units (loads have priority), as for KV."""
        units = self.staging.units
        return max(int(0.2 * units), units - occupied - units // 10)


class Sidecars:
    """Every sidecar of a pipeline; empty for a KV-only pipeline (then every method is a no-op)."""

    def __init__(
        self,
        items: Sequence[Sidecar],
        storage: MultiPoolCalls,
        existence: StorageExistenceCache,
        metrics: PipelineMetrics,
    ) -> None:
        self.items = list(items)
        self.by_name = {item.name: item for item in self.items}
        self.storage = storage
        self.existence = existence
        self.metrics = metrics
        self.lookup_pools = [s.component for s in self.items]
        #: Pages a multi-pool lookup repeats before its first new page (largest trailing window - 1).
        self.overlap = max((s.component.window - 1 for s in self.items), default=0)

    def __bool__(self) -> bool:
        return bool(self.items)

    # ------------------------------------------------------------ plans
    def plan_restore(self, hashes: Sequence[str], start: int, end: int) -> dict[str, Units]:
        """Each sidecar's units for restoring the prefix of ``end`` pages (device holds ``start``)."""
        return {
            item.name: Units([hashes[p] for p in item.component.restore_positions(start, end)]) for item in self.items
        }

    # ------------------------------------------------------------ host units
    def alloc(self, parts: dict[str, Units], owner: object) -> bool:
        """Host units for every part, or none (``False``) when a pool is short."""
        done: list[tuple[Sidecar, Units]] = []
        for name, units in parts.items():
            item = self.by_name[name]
            got = item.staging.alloc(len(units), owner)
            if got is None:
                for undo_item, undo in done:
                    undo_item.staging.release(undo.host)
                    undo.host = []
                return False
            units.host = got
            done.append((item, units))
        return True

    def release(self, parts: dict[str, Units]) -> None:
        """Free the host units of every part."""
        for name, units in parts.items():
            self.by_name[name].staging.release(units.host)
            units.host = []

    def occupied(self, holders: Iterable[dict[str, Units]]) -> dict[str, int]:
        """Host units per sidecar held by ``holders``."""
        out = dict.fromkeys(self.by_name, 0)
        for parts in holders:
            for name, units in parts.items():
                out[name] += len(units.host)
        return out

    # ------------------------------------------------------------ copies
    def to_host(self, batch: Sequence[dict[str, Units]]) -> None:
        """Copy the device units of every part of ``batch`` into their host units (one copy per sidecar)."""
        for item in self.items:
            mine = [parts[item.name] for parts in batch if item.name in parts]
            if len(mine) == 1:
                device, host = mine[0].device, mine[0].host
            else:
                device = [u for units in mine for u in units.device]
                host = [u for units in mine for u in units.host]
            if not device:
                continue
            item.copier.device_to_host(device, host).wait()
            item.row["bytes_device_to_host"] += len(device) * item.unit_bytes

    def to_device(self, parts: dict[str, Units]) -> list[CopyHandle]:
        """Copy each part's host units into its device units; the handles of the copies launched."""
        handles: list[CopyHandle] = []
        for name, units in parts.items():
            if not units.host:
                continue
            item = self.by_name[name]
            handles.append(item.copier.host_to_device(units.host, units.device))
            item.row["bytes_host_to_device"] += len(units.host) * item.unit_bytes
            item.row["units_loaded"] += len(units.host)
        return handles

    # ------------------------------------------------------------ storage
    def write(self, batch: Sequence[dict[str, Units]]) -> list[dict[str, list[bool]]]:
        """Write the parts of every operation of ``batch`` together: each sidecar's units of all of
        them in one ``batch_set_v2`` per batch of pages. Flags per operation, per sidecar (nothing recorded).
        """
        if len(batch) == 1:  # one operation: its parts go out as they are
            parts = batch[0]
            return [self.storage.write_units(self._parts(parts)) if parts else {}]
        merged: dict[str, tuple[list[str], list[int]]] = {}
        for parts in batch:
            for name, units in parts.items():
                hashes, host = merged.setdefault(name, ([], []))
                hashes += units.hashes
                host += units.host
        pool_parts = [
            PoolPart(name, self.by_name[name].unit_tokens, hashes, host)
            for name, (hashes, host) in merged.items()
            if hashes
        ]
        flags = self.storage.write_units(pool_parts) if pool_parts else {}
        offsets = dict.fromkeys(merged, 0)
        out: list[dict[str, list[bool]]] = []
        for parts in batch:
            mine: dict[str, list[bool]] = {}
            for name, units in parts.items():
                begin = offsets[name]
                mine[name] = flags.get(name, [])[begin : begin + len(units)]
                offsets[name] = begin + len(units)
            out.append(mine)
        return out

    def settle(self, parts: dict[str, Units], flags: dict[str, list[bool]]) -> dict[str, int]:
        """Record the beliefs and counters of one operation's written parts; units stored per sidecar."""
        stored: dict[str, int] = {}
        for name, units in parts.items():
            item = self.by_name[name]
            ok = flags.get(name, [])
            done = [h for h, flag in zip(units.hashes, ok, strict=False) if flag]
            self.existence.record(name, done)
            stored[name] = len(done)
            item.row["units_written"] += len(done)
            item.row["units_write_failed"] += len(units) - len(done)
            item.row["bytes_written"] += len(done) * item.unit_bytes
        return stored

    def read(self, parts: dict[str, Units]) -> bool:
        """Read every part in one ``batch_get_v2`` (per batch); ``True`` when every unit was read.

        The beliefs of units that failed are forgotten, so later backups write them again.
        """
        if not any(len(units) for units in parts.values()):
            return True
        flags = self.storage.read_units(self._parts(parts))
        complete = True
        for name, units in parts.items():
            item = self.by_name[name]
            ok = flags.get(name, [])
            good = ok.count(True)
            item.row["units_read"] += good
            item.row["bytes_read"] += good * item.unit_bytes
            if good < len(units):
                complete = False
                item.row["units_read_failed"] += len(units) - good
                failed = [h for h, flag in zip(units.hashes, ok + [False] * len(units), strict=False) if not flag]
                self.existence.invalidate_beyond(name, failed, 0)
        return complete

    def _parts(self, parts: dict[str, Units]) -> list[PoolPart]:
        return [
            PoolPart(name, self.by_name[name].unit_tokens, units.hashes, units.host)
            for name, units in parts.items()
            if len(units)
        ]

    # ------------------------------------------------------------ gauges and checks
    def refresh_gauges(self) -> None:
        """Per-component gauges: backlog and host units used."""
        for item in self.items:
            item.row["backlog_units"] = item.backlog
            item.row["host_used_units"] = item.staging.used
