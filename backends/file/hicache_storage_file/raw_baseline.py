"""The raw baseline benchmarks compare the file backend with: plain Python file I/O, no SDK.

One file per page: ``open`` a temp file, ``write`` the page's buffers, ``os.replace`` onto the final
name; reads ``readinto`` the same buffers; exists is ``os.path.exists``. No checksum, no header.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from .options import FileOptions, resolve_root

__all__ = ["RawFiles"]

Page = memoryview | Sequence[memoryview]


def _segments(page: Page) -> Sequence[memoryview]:
    return [page] if isinstance(page, memoryview) else page


class RawFiles:
    """Raw file I/O under ``directory`` (created if missing); a :class:`~hicache_storage.plugin.RawBaseline`."""

    def __init__(self, directory: Path, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self.fsync = fsync
        self.directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_options(cls, options: FileOptions, timeout_s: float) -> RawFiles:
        """Files in ``<path>/raw-baseline`` of the backend's root (local I/O takes no timeout)."""
        return cls(resolve_root(options) / "raw-baseline")

    def set(self, keys: Sequence[str], pages: Sequence[Page]) -> list[bool]:
        for key, page in zip(keys, pages, strict=True):
            final = os.path.join(self.directory, key)
            temp = final + ".tmp"
            with open(temp, "wb") as handle:
                for segment in _segments(page):
                    handle.write(segment)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(temp, final)
        return [True] * len(keys)

    def get(self, keys: Sequence[str], pages: Sequence[Page]) -> list[bool]:
        results = []
        for key, page in zip(keys, pages, strict=True):
            try:
                with open(os.path.join(self.directory, key), "rb", buffering=0) as handle:
                    results.append(all(handle.readinto(s) == s.nbytes for s in _segments(page)))
            except FileNotFoundError:
                results.append(False)
        return results

    def exists(self, keys: Sequence[str]) -> list[bool]:
        return [os.path.exists(os.path.join(self.directory, key)) for key in keys]

    def close(self) -> None:
        """Remove the baseline's directory and every file in it."""
        shutil.rmtree(self.directory, ignore_errors=True)
