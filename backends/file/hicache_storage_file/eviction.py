"""Size limit for the file backend: which page files to remove when ``max_bytes`` is exceeded.

A prefix cache is read as chains: the engine looks pages up in chain order and stops at the first
miss, so a page whose predecessor was evicted can never be reached again (a *hole*). Evicting in
plain write order makes holes: it removes the head of an old chain while the chain's later pages,
written later, survive as dead weight.

:class:`ChainEviction` (the policy the backend uses) evicts only *leaves*: pages no surviving page
is known to continue. What it knows of chains:

- **Within a batch**: a ``batch_set_v1`` call writes a run of consecutive pages of one chain, in
  chain order (SGLang's backup thread and the reference pipeline both write one span per call,
  split into calls of at most 128 pages). Page ``i`` of a batch continues page ``i - 1``.
- **Across batches**: the first page of a batch continues the page named by the last entry of
  the caller's ``extra_info.prefix_keys`` when it is given (SGLang passes it when enabled).
  A page hash names its predecessor for good (the hash covers it), so a link, once learnt, stays.
- **Order among leaves**: least recently written batch first; inside a batch, the deepest page
  first. A rewrite makes a page recent again; it never reorders a chain, because a page with a
  surviving successor is not a leaf whatever its age.

Guarantee: when every batch's link to its predecessor is known (within-batch always; across
batches through ``prefix_keys``), the pages that survive any sequence of evictions form a prefix
of every chain. Without ``prefix_keys``, a chain split over several batches can lose the head part
(older batch) before the continuation: the continuation is then unreachable until it is itself
evicted or the head is rewritten. Pages found on disk at start-up carry no chain information and
are evicted oldest first (by modification time) before any page written by this process.

:class:`WriteOrderEviction` (least recently written first, no chain knowledge) is kept for
comparison and for callers that replace the policy.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ChainEviction", "WriteOrderEviction"]


@dataclass
class _Page:
    size: int
    parent: str | None
    order: tuple[int, int]  # (batch sequence, -position): smaller is evicted first
    children: set[str] = field(default_factory=set)


class ChainEviction:
    """Tracks page files with their chain links and picks leaf victims above ``max_bytes``.

    Thread-safe. Paths are the page files' paths; sizes are file sizes in bytes.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._pages: dict[str, _Page] = {}
        self._heap: list[tuple[tuple[int, int], int, str]] = []
        self._tiebreak = itertools.count()
        self._sequence = itertools.count(1)
        self._total = 0

    @property
    def total_bytes(self) -> int:
        """Bytes of the tracked page files."""
        with self._lock:
            return self._total

    def __len__(self) -> int:
        with self._lock:
            return len(self._pages)

    def seed(self, entries: Iterable[tuple[str, int, float]]) -> None:
        """Add files found on disk as (path, size, modification time): no links, evicted oldest first."""
        with self._lock:
            for path, size, _mtime in sorted(entries, key=lambda item: item[2]):
                self._add(path, size, None, (0, next(self._tiebreak)))

    def record_write(self, path: str, size: int) -> None:
        """One page file of ``size`` bytes was (re)published at ``path`` (a batch of one page)."""
        self.record_batch([(path, size)])

    def record_batch(self, entries: Sequence[tuple[str, int | None]], parent: str | None = None) -> None:
        """A batch was written: ``entries`` are (path, size) in chain order, ``size=None`` where the
        write failed. ``parent`` is the path of the page the first entry continues, when known."""
        with self._lock:
            batch = next(self._sequence)
            previous = parent
            for position, (path, size) in enumerate(entries):
                if size is not None:
                    self._add(path, size, previous, (batch, -position))
                previous = path

    def _add(self, path: str, size: int, parent: str | None, order: tuple[int, int]) -> None:
        page = self._pages.get(path)
        if page is None:
            page = self._pages[path] = _Page(size, None, order)
            self._total += size
        else:
            self._total += size - page.size
            page.size = size
            page.order = order
        if page.parent is None and parent is not None and parent != path and parent in self._pages:
            page.parent = parent
            self._pages[parent].children.add(path)
        heapq.heappush(self._heap, (page.order, next(self._tiebreak), path))

    def record_removal(self, path: str) -> None:
        """A page file was deleted (not by eviction)."""
        with self._lock:
            self._forget(path)

    def _forget(self, path: str) -> _Page | None:
        page = self._pages.pop(path, None)
        if page is None:
            return None
        self._total -= page.size
        if page.parent is not None:
            parent = self._pages.get(page.parent)
            if parent is not None:
                parent.children.discard(path)
                if not parent.children:
                    heapq.heappush(self._heap, (parent.order, next(self._tiebreak), page.parent))
        for child in page.children:
            orphan = self._pages.get(child)
            if orphan is not None:
                orphan.parent = None
        return page

    def victims(self) -> list[str]:
        """Paths to remove (already forgotten here) so the tracked total fits ``max_bytes``."""
        chosen: list[str] = []
        with self._lock:
            while self._total > self.max_bytes and self._heap:
                order, _tie, path = heapq.heappop(self._heap)
                page = self._pages.get(path)
                if page is None or page.order != order or page.children:
                    continue  # stale entry: gone, rewritten since, or continued by a surviving page
                self._forget(path)
                chosen.append(path)
            if len(self._heap) > 4 * len(self._pages) + 1024:
                self._compact()
        return chosen

    def _compact(self) -> None:
        self._heap = [(p.order, next(self._tiebreak), path) for path, p in self._pages.items() if not p.children]
        heapq.heapify(self._heap)

    def survivors(self) -> set[str]:
        """Paths currently tracked (for tests and tools)."""
        with self._lock:
            return set(self._pages)

    def reset(self) -> None:
        """Forget every tracked file (after ``clear``)."""
        with self._lock:
            self._pages.clear()
            self._heap.clear()
            self._total = 0


class WriteOrderEviction:
    """Tracks page files (path → size) in write order and picks the least recently written above ``max_bytes``.

    Knows nothing of chains, so it can leave holes (see the module documentation).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._total = 0

    @property
    def total_bytes(self) -> int:
        """Bytes of the tracked page files."""
        with self._lock:
            return self._total

    def seed(self, entries: Iterable[tuple[str, int, float]]) -> None:
        """Add existing files as (path, size, modification time); older files are evicted first."""
        for path, size, _mtime in sorted(entries, key=lambda item: item[2]):
            self.record_write(path, size)

    def record_write(self, path: str, size: int) -> None:
        """A page file of ``size`` bytes was (re)published at ``path``: it becomes the newest."""
        with self._lock:
            self._total += size - self._sizes.pop(path, 0)
            self._sizes[path] = size

    def record_batch(self, entries: Sequence[tuple[str, int | None]], parent: str | None = None) -> None:
        """Record a batch in order (links are ignored)."""
        for path, size in entries:
            if size is not None:
                self.record_write(path, size)

    def record_removal(self, path: str) -> None:
        """A page file was deleted."""
        with self._lock:
            self._total -= self._sizes.pop(path, 0)

    def victims(self) -> list[str]:
        """Paths to remove (already forgotten here) so the tracked total fits ``max_bytes``."""
        chosen: list[str] = []
        with self._lock:
            while self._total > self.max_bytes and self._sizes:
                path, size = self._sizes.popitem(last=False)
                self._total -= size
                chosen.append(path)
        return chosen

    def reset(self) -> None:
        """Forget every tracked file (after ``clear``)."""
        with self._lock:
            self._sizes.clear()
            self._total = 0
