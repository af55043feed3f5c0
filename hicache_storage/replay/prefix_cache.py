"""An LRU cache of pages keyed by page hash, each holding one slot of a pool.

Hashes are chain hashes, so a page is reachable only through its prefix: :meth:`match` counts the
leading run present. :meth:`touch` refreshes a request's pages root-last, so the root is the most
recently used and eviction takes the deepest pages (leaves) first, as a radix tree's LRU does.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PageLRU"]


class PageLRU:
    """Up to ``capacity`` pages; slots are page numbers ``0..capacity-1`` of the backing pool."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least one page, got {capacity}")
        self.capacity = capacity
        self._slots: OrderedDict[str, int] = OrderedDict()
        self._free: list[int] = list(range(capacity - 1, -1, -1))

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, page_hash: object) -> bool:
        return page_hash in self._slots

    def slot(self, page_hash: str) -> int:
        """Slot of a cached page (``KeyError`` if absent)."""
        return self._slots[page_hash]

    def match(self, hashes: Sequence[str], start: int = 0) -> int:
        """Length of the run of cached pages beginning at ``hashes[start]``."""
        count = 0
        for page_hash in hashes[start:]:
            if page_hash not in self._slots:
                break
            count += 1
        return count

    def touch(self, hashes: Sequence[str]) -> None:
        """Mark cached pages of ``hashes`` most recently used, the first page last."""
        for page_hash in reversed(hashes):
            if page_hash in self._slots:
                self._slots.move_to_end(page_hash)

    def reserve(self, count: int, protect: Sequence[str] = ()) -> list[int]:
        """Free slots for ``count`` new pages, evicting LRU pages not in ``protect``.

        Returns fewer slots when too many pages are protected.
        """
        guard = set(protect)
        need = count - len(self._free)
        if need > 0:
            victims: list[str] = []
            for page_hash in self._slots:
                if len(victims) >= need:
                    break
                if page_hash not in guard:
                    victims.append(page_hash)
            self._free.extend(self._slots.pop(page_hash) for page_hash in victims)
        take = min(count, len(self._free))
        return [self._free.pop() for _ in range(take)]

    def discard(self, hashes: Sequence[str]) -> None:
        """Drop cached pages (their slots become free)."""
        for page_hash in hashes:
            slot = self._slots.pop(page_hash, None)
            if slot is not None:
                self._free.append(slot)

    def insert(self, page_hash: str, slot: int) -> None:
        """Record ``page_hash`` as held in ``slot`` (most recently used)."""
        self._slots[page_hash] = slot

    def release(self, slots: Sequence[int]) -> None:
        """Return reserved slots that were not used."""
        self._free.extend(slots)
