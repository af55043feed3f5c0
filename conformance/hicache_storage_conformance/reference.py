"""A small in-memory reference backend: the suite's own yardstick and a worked example of the contract.

Pages are stored as :mod:`hicache_storage.plugin.page_format` records in a process-wide dict chosen by the
``store`` option, so instances on the same store share pages (and outlive ``close()``). It offers
the suite's duck-typed side channel: ``raw_store()`` and ``set_available(flag)``.
Run it with ``hicache-storage conformance hicache_storage_conformance.reference:MemoryBackend``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hicache_storage import BackendFault, Capabilities, ConfigError, HiCacheStorage
from hicache_storage.batch_context import BatchContext
from hicache_storage.plugin.page_format import decode_into, encode_record

__all__ = ["MemoryBackend"]

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


class MemoryBackend(HiCacheStorage):
    """Checksummed pages in a shared in-process dict."""

    capabilities = Capabilities(
        persistent=True, supports_delete=True, supports_clear=True, verifies_integrity=True, max_batch_size=64
    )
    Options: ClassVar[type[Any]] = MemoryOptions

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.options: MemoryOptions
        with _LOCK:
            self._store = _STORES.setdefault(self.options.store, OrderedDict())
        self._available = True

    @classmethod
    def capabilities_for(cls, options: Any) -> Capabilities:
        """A page capacity makes the store evict."""
        return dataclasses.replace(cls.capabilities, may_evict=True) if options.capacity_pages else cls.capabilities

    # side channel
    def raw_store(self) -> OrderedDict[str, bytes]:
        """The dict behind this backend (storage key → stored record)."""
        return self._store

    def set_available(self, available: bool) -> None:
        """Simulate the store going away (``False``) and coming back."""
        self._available = available

    def _check(self) -> None:
        if not self._available:
            raise BackendFault("store unavailable")

    # primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        self._check()
        records = [encode_record(page) for page in pages]
        with _LOCK:
            for key, record in zip(keys, records):
                self._store[key] = record
                self._store.move_to_end(key)
            limit = self.options.capacity_pages
            while limit and len(self._store) > limit:
                self._store.popitem(last=False)
        return [True] * len(keys)

    def read_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            records = [self._store.get(key) for key in keys]
        return [record is not None and decode_into(record, page) for record, page in zip(records, pages)]

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            return [key in self._store for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            for key in keys:
                self._store.pop(key, None)
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        self._check()
        with _LOCK:
            if prefixes is None:
                self._store.clear()
                return
            for key in [key for key in self._store if key.startswith(tuple(prefixes))]:
                del self._store[key]
