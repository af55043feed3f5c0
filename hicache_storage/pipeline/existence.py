"""Bounded beliefs about which pages storage holds."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence

__all__ = ["StorageExistenceCache"]


class StorageExistenceCache:
    """A least-recently-used set of ``(pool, page hash)`` believed stored, at most ``capacity`` entries.

    A belief is a hint, not a promise: a stale one (storage evicted the page) costs a skipped
    write, found and undone by :meth:`invalidate_beyond` when a read comes up short; a missing one
    costs an idempotent rewrite. Beliefs of ``main_pool`` (the KV pool, most of them) are kept
    under the bare page hash, the others under ``(pool, page hash)``; all share one recency order.
    """

    def __init__(self, capacity: int = 128 * 1024, main_pool: str = "kv") -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.main_pool = main_pool
        self._entries: OrderedDict[str | tuple[str, str], None] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _key(self, pool: str, page_hash: str) -> str | tuple[str, str]:
        return page_hash if pool == self.main_pool else (pool, page_hash)

    def contains(self, pool: str, page_hash: str) -> bool:
        """Whether ``page_hash`` is believed stored (refreshes its recency)."""
        key = self._key(pool, page_hash)
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        return False

    def holds(self, pool: str, page_hash: str) -> bool:
        """Whether ``page_hash`` is believed stored, leaving its recency as it is."""
        return self._key(pool, page_hash) in self._entries

    def covers_all(self, pool: str, hashes: Iterable[str], extra_cover: Container[str] = ()) -> bool:
        """Whether every hash is believed stored or is in ``extra_cover`` (e.g. writes in flight)."""
        entries = self._entries
        main = pool == self.main_pool
        for page_hash in hashes:
            if page_hash in extra_cover:
                continue
            key = page_hash if main else (pool, page_hash)
            if key not in entries:
                return False
            entries.move_to_end(key)
        return True

    def record(self, pool: str, hashes: Iterable[str]) -> None:
        """Believe ``hashes`` stored; the least recently used beliefs beyond capacity are forgotten."""
        entries = self._entries
        keys: Iterable[str | tuple[str, str]] = hashes if pool == self.main_pool else [(pool, h) for h in hashes]
        for key in keys:
            if key in entries:
                entries.move_to_end(key)
            else:  # (move_to_end right after inserting a new key is slow in CPython)
                entries[key] = None
        while len(entries) > self.capacity:
            entries.popitem(last=False)
            self.evictions += 1

    def invalidate_beyond(self, pool: str, hashes: Sequence[str], keep: int) -> int:
        """Forget the beliefs for ``hashes[keep:]`` (storage holds only the first ``keep``); returns how many."""
        removed = 0
        for page_hash in hashes[max(keep, 0) :]:
            if self._entries.pop(self._key(pool, page_hash), 0) is None:
                removed += 1
        return removed

    def clear(self) -> None:
        """Forget every belief."""
        self._entries.clear()
