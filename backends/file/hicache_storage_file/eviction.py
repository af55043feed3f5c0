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

Sizes are what each page takes on disk (:class:`~hicache_storage_file.footprint.Footprint`), and
``reserved_bytes`` (the directories) counts against ``max_bytes`` too. :class:`SizeLimit` puts it
together for the backend: it charges pages and directories, removes the victims' files and, when
the limit needs their blocks, the directories they leave empty.

:class:`WriteOrderEviction` (least recently written first, no chain knowledge) is kept for
comparison and for callers that replace the policy.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .footprint import Footprint, directories_fit
from .layout import PageLayout

__all__ = ["ChainEviction", "SizeLimit", "WriteOrderEviction", "unlink_files"]


@dataclass
class _Page:
    size: int
    parent: str | None
    order: tuple[int, int]  # (batch sequence, -position): smaller is evicted first
    children: set[str] = field(default_factory=set)


class ChainEviction:
    """Tracks page files with their chain links and picks leaf victims above ``max_bytes``.

    Thread-safe. Paths are the page files' paths; sizes are the bytes each counts against
    ``max_bytes``. ``reserved_bytes`` (not evictable: directories) counts against it too.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        #: Bytes counted against ``max_bytes`` that no eviction frees.
        self.reserved_bytes = 0
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

    def record_batch(self, entries: Sequence[tuple[str, int | None]], parent: str | None = None) -> list[str]:
        """A batch was written: ``entries`` are (path, size) in chain order, ``size=None`` where the
        write failed. ``parent`` is the path of the page the first entry continues, when known.
        Returns the paths that were not tracked before (new files rather than rewrites)."""
        new: list[str] = []
        with self._lock:
            batch = next(self._sequence)
            previous = parent
            for position, (path, size) in enumerate(entries):
                if size is not None and self._add(path, size, previous, (batch, -position)):
                    new.append(path)
                previous = path
        return new

    def _add(self, path: str, size: int, parent: str | None, order: tuple[int, int]) -> bool:
        page = self._pages.get(path)
        fresh = page is None
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
        return fresh

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
            while self._total + self.reserved_bytes > self.max_bytes and self._heap:
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
        self.reserved_bytes = 0
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
            while self._total + self.reserved_bytes > self.max_bytes and self._sizes:
                path, size = self._sizes.popitem(last=False)
                self._total -= size
                chosen.append(path)
        return chosen

    def reset(self) -> None:
        """Forget every tracked file (after ``clear``)."""
        with self._lock:
            self._sizes.clear()
            self._total = 0


@dataclass
class _Directory:
    measured: int  # allocated bytes when last measured (at least one block)
    pending: int = 0  # estimated growth by the entries of pages new since then
    pages: int = 0  # tracked page files in it


class SizeLimit:
    """``max_bytes`` of the file backend over what the disk holds: page files in whole blocks, and each
    directory (the root included) at its allocated size.

    A directory is measured with ``stat`` when first seen and again once as many new pages were
    written as there are directories (one ``stat`` per new page, amortized); until then each new
    page adds :meth:`Footprint.entry <hicache_storage_file.footprint.Footprint.entry>` to it.
    Removing files never shrinks a directory (ext4 keeps its blocks), so evictions free only the
    pages' blocks. Evicts with :class:`ChainEviction` and removes the victims' files. A directory an
    eviction empties stays when every directory of the layout fits the 1/128 share of the limit
    (:func:`~hicache_storage_file.footprint.directories_fit`; so for every fan-out chosen for a
    limit): the next page of its hash range needs it again, and removing and re-creating it costs
    two metadata operations. Otherwise (more levels asked for than the limit affords) it is removed
    to free its block. Deleting pages removes the directories it empties either way.
    Thread-safe.
    """

    def __init__(self, max_bytes: int, layout: PageLayout, footprint: Footprint) -> None:
        self.max_bytes = max_bytes
        self.policy = ChainEviction(max_bytes)
        self._layout = layout
        self._footprint = footprint
        #: Whether directories that evictions empty stay (see the class documentation).
        self.keeps_directories = directories_fit(layout.fanout_levels, max_bytes, footprint.block)
        self._lock = threading.Lock()
        self._directories: dict[str, _Directory] = {}
        self._since_measure = 0

    @property
    def total_bytes(self) -> int:
        """Bytes counted against the limit: tracked pages and directories."""
        return self.policy.total_bytes + self.policy.reserved_bytes

    def seed(self, pages: Iterable[tuple[str, int, float]], directories: Iterable[str]) -> None:
        """Count what is on disk: (path, file size, modification time) of each page, and the directories
        (the root included)."""
        found = list(pages)
        self.directories_created([self._layout.root, *directories])
        self.policy.seed((path, self._footprint.page(size), mtime) for path, size, mtime in found)
        with self._lock:
            for path, _size, _mtime in found:
                self._directory_of(path).pages += 1
        self._measure()

    def directory_created(self, path: str) -> None:
        """A directory was created below the root."""
        self.directories_created([path])

    def directories_created(self, paths: Iterable[str]) -> None:
        with self._lock:
            for path in paths:
                self._directories.setdefault(path.rstrip("/") or "/", _Directory(self._footprint.directory))
            self._update()

    def directories_removed(self, paths: Iterable[str]) -> None:
        with self._lock:
            for path in paths:
                self._directories.pop(path, None)
            self._update()

    def _directory_of(self, path: str) -> _Directory:
        return self._directories.setdefault(path[: path.rfind("/")], _Directory(self._footprint.directory))

    def _update(self) -> None:
        self.policy.reserved_bytes = sum(d.measured + d.pending for d in self._directories.values())

    def _measure(self) -> None:
        """Stat every known directory (outside the lock), then count each at its allocated size."""
        with self._lock:
            paths = list(self._directories)
            self._since_measure = 0
        sizes = {path: self._footprint.measure(path) for path in paths}
        with self._lock:
            for path, size in sizes.items():
                directory = self._directories.get(path)
                if directory is not None:
                    directory.measured, directory.pending = max(self._footprint.directory, size), 0
            self._update()

    def fits(self, path: str, size: int) -> bool:
        """Whether one page file of ``size`` bytes at ``path`` fits the limit at all."""
        return self._footprint.page(size) + self._footprint.directory <= self.max_bytes

    def record_batch(self, entries: Sequence[tuple[str, int | None]], parent: str | None = None) -> None:
        """A batch was written: (path, file size or ``None`` where the write failed), in chain order."""
        new = self.policy.record_batch(
            [(p, None if n is None else self._footprint.page(n)) for p, n in entries], parent
        )
        with self._lock:
            for path in new:  # a rewrite adds no entry
                directory = self._directory_of(path)
                directory.pages += 1
                directory.pending += self._footprint.entry(path)
            self._since_measure += len(new)
            due = self._since_measure >= len(self._directories)
            self._update()
        if due:
            self._measure()

    def _forget_pages(self, paths: Sequence[str]) -> list[str]:
        """Directories left with no tracked page once ``paths`` are gone."""
        emptied = []
        with self._lock:
            for path in paths:
                name = path[: path.rfind("/")]
                directory = self._directories.get(name)
                if directory is not None and directory.pages > 0:
                    directory.pages -= 1
                    if directory.pages == 0:
                        emptied.append(name)
        return emptied

    def record_removal(self, path: str) -> None:
        """A page file was deleted (not by eviction); directories it leaves empty are removed."""
        self.policy.record_removal(path)
        self._remove_empty(self._forget_pages([path]))

    def evict(self, unlink: Callable[[Sequence[str]], object] | None = None) -> int:
        """Remove page files until the counted total fits ``max_bytes``; how many were removed.

        ``unlink(paths)`` removes the victims' files (a missing one is no error); the default removes
        them one after another on the calling thread.
        """
        victims = self.policy.victims()
        if not victims:
            return 0
        (unlink or unlink_files)(victims)
        emptied = self._forget_pages(victims)
        if not self.keeps_directories:
            self._remove_empty(emptied)
        return len(victims)

    def reset(self) -> None:
        """Forget every tracked page (after ``clear``); directories left empty are removed."""
        self.policy.reset()
        with self._lock:
            emptied = [path for path, directory in self._directories.items() if directory.pages]
            for directory in self._directories.values():
                directory.pages = 0
        self._remove_empty(emptied)

    def _remove_empty(self, directories: list[str]) -> None:
        for directory in sorted(directories, key=len, reverse=True):
            self.directories_removed(self._layout.remove_empty_directories(directory))


def unlink_files(paths: Sequence[str]) -> None:
    """Remove the files at ``paths`` in order (those already gone are skipped)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
