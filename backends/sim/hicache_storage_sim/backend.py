"""The sim backend: an in-memory store with SGLang's cost model, seeded faults and outages.

Every primitive call is charged ``op_latency + bytes / bandwidth`` (bytes actually moved). By
default nothing sleeps: the charge is added to the ``modelled_seconds`` counter (and
``modelled_<op>_seconds``) and kept in :attr:`SimBackend.last_call_seconds`, so a caller with its
own clock can advance it; with ``sleep: true`` the call really takes that long.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendFault,
    BackendSetup,
    BatchContext,
    Capabilities,
    PageBuffers,
    StoredPage,
    page_after,
)
from hicache_storage.plugin.page_format import HEADER_SIZE, record_codec

from .cost import CostModel
from .faults import FaultInjector
from .options import SimOptions
from .store import SimStore, drop_store, open_store

__all__ = ["SimBackend"]


class SimBackend(Backend[SimOptions]):
    """Simulated storage (see :class:`SimOptions`). Thread-safe.

    Capabilities follow the options: ``persistent``/``shared`` with a named ``store``,
    ``may_evict`` with ``capacity_bytes``, ``verifies_integrity`` unless ``keys_only``.
    ``store`` is the :class:`~hicache_storage_sim.store.SimStore` it serves (shared by every
    instance of a named store; ``store.available = False`` makes every primitive fail).
    """

    Options = SimOptions
    capabilities = SHARED_STORE.with_overrides({"zero_copy": True, "persistent": False, "shared": False})

    def __init__(self, setup: BackendSetup[SimOptions]) -> None:
        options = setup.options
        self.counters = setup.counters
        self.cost = CostModel.from_options(options)
        self._sleep = options.sleep
        self._keys_only = options.keys_only
        self._codec = record_codec(options)
        self.store: SimStore = open_store(options.store, options.capacity_bytes, options.keys_only)
        if options.capacity_bytes is not None:
            self.counters.watch_evictions(options.capacity_bytes, "sim backend (capacity_bytes)")
        self._faults = FaultInjector(
            {"get": options.fail_get_rate, "set": options.fail_set_rate, "exists": options.fail_exists_rate},
            options.fault_seed,
        )
        self._lock = threading.Lock()
        #: Modelled seconds of the most recent primitive call (any thread).
        self.last_call_seconds = 0.0

    @classmethod
    def capabilities_for(cls, options: SimOptions) -> Capabilities:
        """A named store persists and is shared; a capacity evicts; ``keys_only`` stores no bytes to check."""
        shared = bool(options.store)
        return replace(
            cls.capabilities,
            persistent=shared,
            shared=shared,
            may_evict=options.capacity_bytes is not None,
            verifies_integrity=not options.keys_only,
        )

    # ------------------------------------------------------------ state
    @property
    def used_bytes(self) -> int:
        """Payload bytes in the store (what ``capacity_bytes`` limits)."""
        return self.store.used_bytes

    @staticmethod
    def drop_store(name: str) -> None:
        """Forget the process-wide store called ``name``."""
        drop_store(name)

    # ------------------------------------------------------------ cost and faults
    def _charge(self, op: str, nbytes: int) -> None:
        seconds = self.cost.seconds(op, nbytes)
        with self._lock:
            self.last_call_seconds = seconds
        self.counters.bump("modelled_seconds", seconds)
        self.counters.bump(f"modelled_{op}_seconds", seconds)
        if self._sleep:
            time.sleep(seconds)

    def _enter(self, op: str, metadata: bool = False) -> None:
        """Fail the call the way a real backend would, charging its latency (metadata calls: only when unavailable)."""
        try:
            if not self.store.available:
                raise BackendFault(f"sim store {self.store.name or '(private)'} is unavailable")
            if not metadata:
                self._faults.check(op)
        except BackendFault:
            self._charge(op, 0)
            raise

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        metadata = context.record_bytes is not None  # a key-space manifest: no modelled cost, no injected fault
        self._enter("set", metadata)
        results = []
        moved = evicted = 0
        for key, page in zip(keys, pages, strict=True):
            size = sum(segment.nbytes for segment in page)
            record = b"" if self._keys_only else self._codec.record(key, page)
            stored, dropped = self.store.put(key, record, size)
            evicted += dropped
            moved += size if stored else 0
            results.append(stored)
        if evicted:
            self.counters.bump("evictions", evicted)
        if not metadata:
            self._charge("set", moved)
        return results

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        metadata = context.record_bytes is not None
        self._enter("get", metadata)
        results = []
        moved = 0
        for key, page in zip(keys, pages, strict=True):
            record = self.store.get(key)
            if record is None:
                hit = False
            elif self._keys_only:
                for segment in page:
                    segment[:] = bytes(segment.nbytes)
                hit = True
            else:
                hit = self._codec.decode_into(record, key, page)
                if not hit:
                    self.counters.bump("integrity_failures")
            if hit:
                moved += sum(segment.nbytes for segment in page)
            results.append(hit)
        if not metadata:
            self._charge("get", moved)
        return results

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._enter("exists")
        want = None if self._keys_only else HEADER_SIZE + context.page_bytes
        results = []
        for key in keys:
            record = self.store.peek(key)
            results.append(record is not None and (want is None or len(record) == want))
        self._charge("exists", 0)
        return results

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._enter("delete")
        for key in keys:
            self.store.delete(key)
        self._charge("delete", 0)
        return [True] * len(keys)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Stored records in key order (sizes from the records; no write times)."""
        self._enter("list")
        stored = ((key, self.store.peek(key)) for key in self.store.keys())  # noqa: SIM118 (a method, not a dict)
        records = [StoredPage(key, len(record)) for key, record in stored if record is not None]
        return page_after(records, prefix, cursor, limit)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        self._enter("clear")
        if prefixes is None:
            self.store.clear()
        else:
            starts = tuple(prefixes)
            for key in self.store.keys():  # noqa: SIM118 (a method, not a dict)
                if key.startswith(starts):
                    self.store.delete(key)
        self._charge("clear", 0)
