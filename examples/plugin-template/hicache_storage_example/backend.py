"""An in-memory backend written against the three primitives of :class:`hicache_storage.HiCacheStorage`.

The base class validates requests, maps page hashes to storage keys, splits batches, turns
exceptions into misses and keeps statistics; this class only stores and fetches bytes. Its
test-only hooks (reaching the stored records, making the store fail) live in ``conformance.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from hicache_storage import BatchContext, Capabilities, ConfigError, HiCacheStorage, HiCacheStorageConfig, PageBuffers
from hicache_storage.plugin.page_format import decode_into, encode_record


@dataclass(frozen=True)
class ExampleOptions:
    """Options read from ``extra_config``; unknown names and wrong types are rejected for you.

    - ``max_pages``: most pages held at once (0 = no limit); a write beyond it fails.
    """

    max_pages: int = 0

    def __post_init__(self) -> None:
        if self.max_pages < 0:
            raise ConfigError("extra_config.max_pages", f"must be >= 0, got {self.max_pages}")


class ExampleBackend(HiCacheStorage):
    """Stores each page as a checksummed record in a dict, so a damaged page reads as a miss."""

    capabilities = Capabilities(supports_delete=True, supports_clear=True, verifies_integrity=True)
    Options = ExampleOptions

    def __init__(self, config: HiCacheStorageConfig) -> None:
        super().__init__(config)
        self._records: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        results = []
        for key, page in zip(keys, pages):
            record = encode_record(page)  # header + payload, built before the page becomes visible
            with self._lock:
                full = 0 < self.options.max_pages <= len(self._records) and key not in self._records
                if not full:
                    self._records[key] = record
            results.append(not full)
        return results

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        results = []
        for key, page in zip(keys, pages):
            with self._lock:
                record = self._records.get(key)
            results.append(record is not None and decode_into(record, page))
        return results

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        with self._lock:
            return [key in self._records for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        with self._lock:
            for key in keys:
                self._records.pop(key, None)
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        with self._lock:
            if prefixes is None:
                self._records.clear()
                return
            for key in [key for key in self._records if key.startswith(tuple(prefixes))]:
                del self._records[key]
