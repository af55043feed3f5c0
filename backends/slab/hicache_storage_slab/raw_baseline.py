"""The physical baseline the slab backend is measured against: positional I/O into one preallocated file.

Each key gets a 4 KiB-aligned extent of the file (an in-memory table, nothing on disk); ``set`` is one
``os.pwritev`` of the page's buffers at its extent, ``get`` one ``os.preadv`` into them, ``exists`` a
table lookup. No header, no checksum, no eviction, nothing survives the process: the cost of moving
the bytes and nothing else.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

from hicache_storage.plugin.io_threads import IoThreads

from .options import SlabOptions, io_thread_count, resolve_root
from .store_files import no_readahead

__all__ = ["RawSlab"]

Page = memoryview | Sequence[memoryview]
_ALIGN = 4096
_GROW = 64 << 20


def _segments(page: Page) -> list[memoryview]:
    views = [page] if isinstance(page, memoryview) else list(page)
    return [v if v.format == "B" and v.ndim == 1 else v.cast("B") for v in views]


class RawSlab:
    """Raw ``pwritev``/``preadv`` under ``directory``; satisfies ``hicache_storage.plugin.RawBaseline``.

    ``reserve_bytes`` are preallocated up front (the file grows by ``posix_fallocate`` otherwise);
    ``threads`` spread a batch like the backend's ``io_threads``; ``direct`` opens with ``O_DIRECT``.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        reserve_bytes: int = 0,
        threads: int = 1,
        fsync: bool = False,
        direct: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "raw.slab"
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | (getattr(os, "O_DIRECT", 0) if direct else 0)
        self.fd = os.open(self.path, flags, 0o600)
        no_readahead(self.fd)  # a read fetches the page's bytes, nothing past them
        self.fsync = fsync
        self._io = IoThreads(threads)
        self._lock = threading.Lock()
        self._extents: dict[str, tuple[int, int]] = {}
        self._end = 0
        self._size = 0
        if reserve_bytes:
            self._reserve(reserve_bytes)

    @classmethod
    def from_options(cls, options: SlabOptions, timeout_s: float) -> RawSlab:
        """Positional I/O into one preallocated file in ``<path>/raw-baseline``, the backend's threads and fsync."""
        return cls(resolve_root(options) / "raw-baseline", threads=io_thread_count(options), fsync=options.fsync)

    def _reserve(self, size: int) -> None:
        if size > self._size:
            os.posix_fallocate(self.fd, 0, size)
            self._size = size

    def _extent(self, key: str, length: int) -> int:
        with self._lock:
            known = self._extents.get(key)
            if known is not None and known[1] == length:
                return known[0]
            offset = self._end
            self._end += -(-length // _ALIGN) * _ALIGN
            if self._end > self._size:
                self._reserve(max(self._end, self._size + _GROW))
            self._extents[key] = (offset, length)
            return offset

    def _put(self, key: str, page: Page) -> bool:
        segments = _segments(page)
        length = sum(s.nbytes for s in segments)
        offset = self._extent(key, length)
        done = os.pwritev(self.fd, segments, offset)
        return done == length

    def _fetch(self, key: str, page: Page) -> bool:
        segments = _segments(page)
        length = sum(s.nbytes for s in segments)
        known = self._extents.get(key)
        if known is None or known[1] != length:
            return False
        return os.preadv(self.fd, segments, known[0]) == length

    def set(self, keys: Sequence[str], pages: Sequence[Page]) -> list[bool]:
        results = self._io.map(self._put, keys, pages)
        if self.fsync:
            os.fdatasync(self.fd)
        return results

    def get(self, keys: Sequence[str], pages: Sequence[Page]) -> list[bool]:
        return self._io.map(self._fetch, keys, pages)

    def exists(self, keys: Sequence[str]) -> list[bool]:
        return [key in self._extents for key in keys]

    def drop_cache(self) -> None:
        """Write back and evict this file's pages from the page cache (``posix_fadvise`` ``DONTNEED``)."""
        os.fdatasync(self.fd)
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        """Close the file and remove the baseline's directory."""
        self._io.close()
        os.close(self.fd)
        shutil.rmtree(self.directory, ignore_errors=True)
