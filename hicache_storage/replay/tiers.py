"""Host tier models: none, and cache (an LRU host cache with write-through); buffer-only is in :mod:`.buffer_tier`.

A tier serves the part of a prompt that the device cache missed (``load``) and backs up the pages
the engine just computed (``backup``). Loaded pages are checked against their expected content.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..host_pool import HostKVPool
from .kvdata import PageView, copy_pages, matching_prefix, pool_bytes
from .prefix_cache import PageLRU
from .storage_io import StorageIO

__all__ = ["CacheTier", "HostTier", "LoadOutcome", "NoTier", "StorageTier"]


@dataclass
class LoadOutcome:
    """Pages served by host memory and by storage (placed in the first device slots).

    ``kv_pages``: pages beyond the start whose KV host memory or storage held, restorable or
    not (a hybrid model's prefix also needs its sidecars); ``units``: sidecar units loaded, by
    ``"<component>/<tier>"``.
    """

    host_pages: int = 0
    storage_pages: int = 0
    kv_pages: int = 0
    units: dict[str, int] = field(default_factory=dict)


class HostTier(Protocol):
    """What the engine needs from a host tier."""

    host_pool_pages: int
    gate_drops: Counter[str]
    corrupt_pages: int

    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        """Load pages ``hashes[start:]`` (at most ``len(device_slots)``) into ``device_slots``."""
        ...

    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        """Back up the computed pages ``hashes[begin:end]`` held in ``device_slots``."""
        ...


class NoTier:
    """No host tier and no storage."""

    def __init__(self) -> None:
        self.host_pool_pages = 0
        self.gate_drops: Counter[str] = Counter()
        self.corrupt_pages = 0

    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        return LoadOutcome()

    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        return None


class StorageTier:
    """Shared parts: the device view, the host pool registered with the backend, storage I/O."""

    def __init__(self, device: PageView, host: HostKVPool, storage: StorageIO) -> None:
        self.device = device
        self.host_pool = host
        self.host = pool_bytes(host)
        self.storage = storage
        self.host_pool_pages = host.page_num
        self.gate_drops: Counter[str] = Counter()
        self.corrupt_pages = 0

    def _read_checked(self, hashes: list[str], host_slots: list[int], prefix: Sequence[str] = ()) -> int:
        """Read into host slots; returns the leading run read *and* verified."""
        read = self.storage.read(hashes, host_slots, prefix)
        good = matching_prefix(self.host, host_slots[:read], hashes[:read])
        self.corrupt_pages += read - good
        return good


class CacheTier(StorageTier):
    """Host memory as an LRU cache tier; every computed page is written through to host and storage."""

    def __init__(self, device: PageView, host: HostKVPool, storage: StorageIO) -> None:
        super().__init__(device, host, storage)
        self.lru = PageLRU(host.page_num)
        self.stored: set[str] = set()

    def load(self, hashes: list[str], start: int, device_slots: list[int]) -> LoadOutcome:
        limit = len(device_slots)
        in_host = min(self.lru.match(hashes, start), limit)
        host_slots = [self.lru.slot(h) for h in hashes[start : start + in_host]]
        in_host = matching_prefix(self.host, host_slots, hashes[start : start + in_host])
        copy_pages(self.device, device_slots[:in_host], self.host, host_slots[:in_host])
        self.lru.touch(hashes[: start + in_host])
        outcome = LoadOutcome(host_pages=in_host, kv_pages=in_host)
        first = start + in_host
        wanted = hashes[first : start + limit]
        if not wanted:
            return outcome
        found = self.storage.exists_prefix(wanted, hashes[:first])
        outcome.kv_pages += found
        if not found:
            return outcome
        slots = self.lru.reserve(found, protect=hashes[:first])
        got = self._read_checked(wanted[: len(slots)], slots, hashes[:first])
        for page_hash, slot in zip(wanted[:got], slots[:got], strict=True):
            self.lru.insert(page_hash, slot)
            self.stored.add(page_hash)
        self.lru.release(slots[got:])
        copy_pages(self.device, device_slots[in_host : in_host + got], self.host, slots[:got])
        self.lru.touch(hashes[: first + got])
        outcome.storage_pages = got
        return outcome

    def backup(self, hashes: list[str], begin: int, end: int, device_slots: list[int]) -> None:
        new = hashes[begin:end]
        slots = self.lru.reserve(len(new), protect=hashes[:begin])
        if len(slots) < len(new):
            self.gate_drops["host_full"] += len(new) - len(slots)
        kept = new[: len(slots)]
        copy_pages(self.host, slots, self.device, device_slots[: len(slots)])
        for page_hash, slot in zip(kept, slots, strict=True):
            self.lru.insert(page_hash, slot)
        self.lru.touch(hashes[: begin + len(kept)])
        if not self.storage.pass_prefix_keys:  # one call for every page not stored yet
            pending = [(h, s) for h, s in zip(kept, slots, strict=True) if h not in self.stored]
            if pending:
                done = self.storage.write([h for h, _ in pending], [s for _, s in pending])
                self.stored.update(h for h, _ in pending[:done])
            return
        run: list[tuple[int, int]] = []  # (position in hashes, host slot) of one run of pages to write
        for position, slot in enumerate(slots, start=begin):
            if hashes[position] not in self.stored:
                if run and run[-1][0] != position - 1:
                    self._write_run(hashes, run)
                    run = []
                run.append((position, slot))
        if run:
            self._write_run(hashes, run)

    def _write_run(self, hashes: list[str], run: list[tuple[int, int]]) -> None:
        """Write consecutive pages of the chain ``hashes`` (the pages before them named as their prefix)."""
        first = run[0][0]
        written = [hashes[position] for position, _slot in run]
        done = self.storage.write(written, [slot for _position, slot in run], hashes[:first])
        self.stored.update(written[:done])
