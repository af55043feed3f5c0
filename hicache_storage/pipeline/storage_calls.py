"""Storage calls the way SGLang's engine makes them: batches of at most N pages, stop at the first miss.

No method raises for a backend problem: an exception from the backend (a contract breach, since
batch calls must not raise) counts as a miss or a failed write and is counted in ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..interface import HiCacheStorage
from .staging import token_indices

__all__ = ["StorageCalls"]


class StorageCalls:
    """Chunked, fault-tolerant calls to ``storage`` for one host pool's pages."""

    def __init__(self, storage: HiCacheStorage, page_size: int, batch_pages: int) -> None:
        self.storage = storage
        self.page_size = page_size
        self.batch_pages = batch_pages
        self.errors = 0

    def leading_hits(self, hashes: Sequence[str]) -> int:
        """Length of the run of stored pages at the start of ``hashes`` (``batch_exists`` per batch)."""
        hit = 0
        for begin in range(0, len(hashes), self.batch_pages):
            chunk = list(hashes[begin : begin + self.batch_pages])
            try:
                found = int(self.storage.batch_exists(chunk))
            except Exception:
                self.errors += 1
                found = 0
            hit += max(0, min(found, len(chunk)))
            if found < len(chunk):
                break
        return hit

    def write_leading(self, hashes: Sequence[str], host_pages: Sequence[int]) -> int:
        """Write pages from host slots; the length of the leading run acknowledged stored."""
        return self._leading(self.storage.batch_set_v1, hashes, host_pages)

    def read_leading(self, hashes: Sequence[str], host_pages: Sequence[int]) -> int:
        """Read pages into host slots; the length of the leading run read successfully."""
        return self._leading(self.storage.batch_get_v1, hashes, host_pages)

    def _leading(self, call: Callable[..., Any], hashes: Sequence[str], host_pages: Sequence[int]) -> int:
        done = 0
        for begin in range(0, len(hashes), self.batch_pages):
            keys = list(hashes[begin : begin + self.batch_pages])
            indices = token_indices(host_pages[begin : begin + len(keys)], self.page_size)
            try:
                results = call(keys, indices)
            except Exception:
                self.errors += 1
                return done
            if not isinstance(results, list) or len(results) != len(keys):
                self.errors += 1
                return done
            for ok in results:
                if ok is not True:
                    return done
                done += 1
        return done
