"""An in-memory backend: the three primitives of :class:`hicache_storage.plugin.Backend`.

The SDK validates requests, maps page hashes to storage keys, splits batches, turns exceptions
into misses and keeps statistics; this class only stores and fetches bytes. Its test-only hooks
(reaching the stored records, making the store fail) live in ``conformance.py``.
``ExampleRawClient`` is the raw baseline ``hicache-storage bench`` times the backend against.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

from hicache_storage.plugin import Backend, BackendSetup, BatchContext, Capabilities, ConfigError, PageBuffers
from hicache_storage.plugin.page_format import decode_into, encode_record

__all__ = ["ExampleBackend", "ExampleOptions", "ExampleRawClient"]


@dataclass(frozen=True)
class ExampleOptions:
    """Options read from ``extra_config``; unknown names and wrong types are rejected for you.

    - ``max_pages``: most pages held at once (0 = no limit); a write beyond it fails.
    """

    max_pages: int = 0

    def __post_init__(self) -> None:
        if self.max_pages < 0:
            raise ConfigError("extra_config.max_pages", f"must be >= 0, got {self.max_pages}")


class ExampleRawClient:
    """The same store with none of the SDK (no key space, no record, no checks), for ``hicache-storage bench``.

    A real backend's raw client talks to the same service with the backend's settings (same
    address, credentials and timeouts), built by :meth:`from_options` from the parsed options.
    """

    def __init__(self, max_pages: int) -> None:
        self.max_pages = max_pages
        self._values: dict[str, bytes] = {}

    @classmethod
    def from_options(cls, options: ExampleOptions, timeout_s: float) -> ExampleRawClient:
        """The raw client for the backend's options (``timeout_s``: the backend's I/O timeout)."""
        return cls(options.max_pages)

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        for key, buffer in zip(keys, buffers, strict=True):
            self._values[key] = bytes(buffer)
        return [True] * len(keys)

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        results = []
        for key, buffer in zip(keys, buffers, strict=True):
            value = self._values.get(key)
            view = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
            if value is None or len(value) != view.nbytes:  # absent or of another size: a miss
                results.append(False)
                continue
            view[:] = value
            results.append(True)
        return results

    def exists(self, keys: Sequence[str]) -> list[bool]:
        return [key in self._values for key in keys]

    def close(self) -> None:
        """Remove what this client wrote."""
        self._values.clear()


class ExampleBackend(Backend[ExampleOptions]):
    """Stores each page as a checksummed record in a dict, so a damaged page reads as a miss."""

    capabilities = Capabilities(supports_delete=True, supports_clear=True, verifies_integrity=True)
    Options = ExampleOptions  # ``setup.options`` is an ExampleOptions, parsed from extra_config
    raw_baseline_class = ExampleRawClient

    def __init__(self, setup: BackendSetup[ExampleOptions]) -> None:
        self.max_pages = setup.options.max_pages
        self.records: MutableMapping[str, bytes] = {}
        self._lock = threading.Lock()

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        results = []
        for key, page in zip(keys, pages):
            record = encode_record(page)  # header + payload, built before the page becomes visible
            with self._lock:
                full = 0 < self.max_pages <= len(self.records) and key not in self.records
                if not full:
                    self.records[key] = record
            results.append(not full)
        return results

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        results = []
        for key, page in zip(keys, pages):
            with self._lock:
                record = self.records.get(key)
            results.append(record is not None and decode_into(record, page))
        return results

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        with self._lock:
            return [key in self.records for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        with self._lock:
            for key in keys:
                self.records.pop(key, None)
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        with self._lock:
            if prefixes is None:
                self.records.clear()
                return
            for key in [key for key in self.records if key.startswith(tuple(prefixes))]:
                del self.records[key]
