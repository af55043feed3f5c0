"""The raw client ``hicache-storage bench fsspec`` compares the backend with: the fsspec filesystem, no SDK.

The filesystem is opened from the backend's own options (``url``, ``storage_options`` with the same
client defaults: timeouts, no client retries, own s3fs instance). Each call is one bulk fsspec call:
``fs.pipe({path: page})`` (async filesystems take ``bytes``, so each buffer is copied once, as the
backend's record is; others write the buffer itself), ``fs.cat(paths)`` copied into the buffers (a
hit only when the file has the buffer's size); on async filesystems (s3fs, gcsfs...) both run with
``batch_size=concurrency`` and exists is ``fs._exists`` per path, ``concurrency`` at a time, on the
filesystem's loop; elsewhere ``fs.exists`` per path. No record header, no checksum, no fan-out, no
temp file and rename, no key space. Files are ``<root>/raw-baseline/<key>``, a folder no page
record is ever stored in.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from fsspec.asyn import sync
from fsspec.implementations.local import LocalFileSystem

from hicache_storage.plugin.vectored_io import flat_view

from .filesystem import open_filesystem
from .options import FsspecOptions

__all__ = ["RAW_FOLDER", "RawFsspec"]

#: Folder under the root holding every file the raw client writes.
RAW_FOLDER = "raw-baseline"


class RawFsspec:
    """fsspec bulk calls under ``<root>/raw-baseline/``; a :class:`~hicache_storage.plugin.RawBaseline`.

    ``close()`` removes that folder and everything in it.
    """

    def __init__(self, fs: Any, root: str, concurrency: int) -> None:
        self.fs = fs
        self.folder = f"{root.rstrip('/')}/{RAW_FOLDER}"
        self.concurrency = concurrency
        self._async = bool(getattr(fs, "async_impl", False))
        self._batch: dict[str, Any] = {"batch_size": concurrency} if self._async else {}
        if isinstance(fs, LocalFileSystem):
            fs.makedirs(self.folder, exist_ok=True)

    @classmethod
    def from_options(cls, options: FsspecOptions, timeout_s: float) -> RawFsspec:
        """The filesystem the backend would open (``timeout_s`` of the options, else ``timeout_s``)."""
        fs, root, _storage_options = open_filesystem(options, options.timeout_s or timeout_s)
        return cls(fs, root, options.concurrency)

    def path(self, key: str) -> str:
        """The path (without protocol) the raw client uses for ``key``."""
        return f"{self.folder}/{key}"

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        values = {
            self.path(key): bytes(flat_view(buffer)) if self._async else flat_view(buffer)
            for key, buffer in zip(keys, buffers, strict=True)
        }
        self.fs.pipe(values, **self._batch)
        return [True] * len(keys)

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        paths = [self.path(key) for key in keys]
        found = self.fs.cat(paths, on_error="return", **self._batch)
        results = []
        for path, buffer in zip(paths, buffers, strict=True):
            value = found.get(path)
            view = flat_view(buffer)
            hit = isinstance(value, bytes) and len(value) == view.nbytes
            if hit:
                view[:] = value
            results.append(hit)
        return results

    def exists(self, keys: Sequence[str]) -> list[bool]:
        paths = [self.path(key) for key in keys]
        if not self._async:
            return [bool(self.fs.exists(path)) for path in paths]

        async def check_all() -> list[bool]:
            gate = asyncio.Semaphore(self.concurrency)

            async def check(path: str) -> bool:
                async with gate:
                    return bool(await self.fs._exists(path))

            return list(await asyncio.gather(*(check(path) for path in paths)))

        return list(sync(self.fs.loop, check_all))

    def close(self) -> None:
        """Remove ``<root>/raw-baseline`` and everything in it."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.folder, recursive=True)
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache()
