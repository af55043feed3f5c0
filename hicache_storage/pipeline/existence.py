"""Bounded beliefs about which pages storage holds."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence

__all__ = ["StorageExistenceCache"]


class StorageExistenceCache:
    """A least-recently-used set of ``(pool, page hash)`` believed stored, at most ``capacity`` entries.

    A belief is a hint, not a promise: a stale one (storage evicted the page) costs a skipped
    write, found and undone by :meth:`invalidate_beyond` when a read comes up short; a missing one
    costs an idempotent rewrite.
    """

    def __init__(self, capacity: int = 128 * 1024) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, pool: str, page_hash: str) -> bool:
        """Whether ``page_hash`` is believed stored (refreshes its recency)."""
        key = (pool, page_hash)
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        return False

    def holds(self, pool: str, page_hash: str) -> bool:
        """Whether ``page_hash`` is believed stored, leaving its recency as it is."""
        return (pool, page_hash) in self._entries

    def covers_all(self, pool: str, hashes: Iterable[str], extra_cover: Container[str] = ()) -> bool:
        """Whether every hash is believed stored or is in ``extra_cover`` (e.g. writes in flight)."""
        entries = self._entries
        for page_hash in hashes:
            if page_hash in extra_cover:
                continue
            key = (pool, page_hash)
            if key not in entries:
                return False
            entries.move_to_end(key)
        return True

    def record(self, pool: str, hashes: Iterable[str]) -> None:
        """Believe ``hashes`` stored; the least recently used beliefs beyond capacity are forgotten."""
        entries = self._entries
        for page_hash in hashes:
            key = (pool, page_hash)
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
            if self._entries.pop((pool, page_hash), 0) is None:
                removed += 1
        return removed

    def clear(self) -> None:
        """Forget every belief."""
        self._entries.clear()
