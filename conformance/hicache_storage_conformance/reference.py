"""A small in-memory reference backend: the suite's own yardstick and a worked example of the contract.

Pages are stored as :mod:`hicache_storage.plugin.page_format` records in a process-wide dict chosen by the
``store`` option, so instances on the same store share pages (and outlive ``close()``). Its
test-only hooks are :class:`MemoryHooks` (the dict behind it, and an outage switch). Run it with
``hicache-storage conformance hicache_storage_conformance.reference:MemoryBackend --hooks
hicache_storage_conformance.reference:MemoryHooks``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hicache_storage.plugin import Backend, BackendFault, BackendSetup, BatchContext, Capabilities, ConfigError
from hicache_storage.plugin.page_format import decode_into, encode_record

__all__ = ["MemoryBackend", "MemoryHooks"]

_STORES: dict[str, OrderedDict[str, bytes]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class MemoryOptions:
    """``store``: name of the process-wide store; ``capacity_pages``: evict oldest beyond it (0 = never)."""

    store: str = "default"
    capacity_pages: int = 0

    def __post_init__(self) -> None:
        if self.capacity_pages < 0:
            raise ConfigError("extra_config.capacity_pages", f"must be >= 0, got {self.capacity_pages}")


class MemoryBackend(Backend[MemoryOptions]):
    """Checksummed pages in a shared in-process dict; ``available`` set to ``False`` makes every call fail."""

    capabilities = Capabilities(
        persistent=True, supports_delete=True, supports_clear=True, verifies_integrity=True, max_batch_size=64
    )
    Options = MemoryOptions

    def __init__(self, setup: BackendSetup[MemoryOptions]) -> None:
        self.capacity_pages = setup.options.capacity_pages
        with _LOCK:
            self.store = _STORES.setdefault(setup.options.store, OrderedDict())
        self.available = True

    @classmethod
    def capabilities_for(cls, options: Any) -> Capabilities:
        """A page capacity makes the store evict."""
        return dataclasses.replace(cls.capabilities, may_evict=True) if options.capacity_pages else cls.capabilities

    def _check(self) -> None:
        if not self.available:
            raise BackendFault("store unavailable")

    # primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        self._check()
        records = [encode_record(page) for page in pages]
        with _LOCK:
            for key, record in zip(keys, records):
                self.store[key] = record
                self.store.move_to_end(key)
            limit = self.capacity_pages
            while limit and len(self.store) > limit:
                self.store.popitem(last=False)
        return [True] * len(keys)

    def read_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            records = [self.store.get(key) for key in keys]
        return [record is not None and decode_into(record, page) for record, page in zip(records, pages)]

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            return [key in self.store for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            for key in keys:
                self.store.pop(key, None)
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        self._check()
        with _LOCK:
            if prefixes is None:
                self.store.clear()
                return
            for key in [key for key in self.store if key.startswith(tuple(prefixes))]:
                del self.store[key]


class MemoryHooks:
    """The conformance hooks of :class:`MemoryBackend`: its dict, and switching it off and on."""

    def raw_store(self, backend: MemoryBackend) -> OrderedDict[str, bytes]:
        return backend.store

    def stop_server(self, backend: MemoryBackend) -> None:
        backend.available = False

    def start_server(self, backend: MemoryBackend) -> None:
        backend.available = True
