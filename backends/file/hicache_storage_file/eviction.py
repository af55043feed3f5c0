"""Size limit for the file backend: which page files to remove when ``max_bytes`` is exceeded.

:class:`WriteOrderEviction` removes the least recently written pages first. It only knows the
pages this process wrote or found at start-up. The policy is a separate object so a chain-aware
policy (evicting the tail pages of a prefix chain before its head) can replace it: override
:meth:`WriteOrderEviction.victims`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["WriteOrderEviction"]


class WriteOrderEviction:
    """Tracks page files (path → size) in write order and picks victims above ``max_bytes``."""

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
