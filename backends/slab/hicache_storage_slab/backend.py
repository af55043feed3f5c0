"""The slab backend: a local flash cache of fixed-size slots in preallocated files.

Every key space (one per pool: KV, and each sidecar pool with its own page size) has its own slab
below ``extra_config.path``, sized by ``capacity_bytes`` and preallocated (``posix_fallocate``) when
the key space is first used. A key lives in one of the ``ways`` slots of the set its digest selects;
the slot headers in the file are the whole index, so every process that opens the slab (one per TP
rank in SGLang) sees the others' pages, and a restarted process sees what was written before.
Writes ``pwritev`` straight from host memory and become visible only once their header commits;
reads ``preadv`` straight into host memory and verify key, length and XXH3 checksum. See
:mod:`hicache_storage_slab.slab` for the slot protocol and ``docs/backends/slab.md`` for the design.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from collections.abc import Sequence
from typing import Any

from hicache_storage import BackendFault, Capabilities, ConfigError, HiCacheStorage, HiCacheStorageConfig, KeySpace
from hicache_storage.batch_context import BatchContext

from .layout import ENTRY_SIZE, Geometry, SuperblockError, parse_superblock
from .options import SlabOptions, io_thread_count, resolve_root
from .parallel import IoThreads
from .raw_baseline import RawSlab
from .slab import Slab, WritePlan, blank_headers
from .slab_files import SLAB_FILE_MARK, SlabFile

__all__ = ["SlabBackend", "SlotStore"]

#: Seconds a key space whose slab could not be opened (disk full, I/O error) fails fast before a retry.
RETRY_OPEN_S = 5.0


class SlabBackend(HiCacheStorage[SlabOptions]):
    """Pages in fixed-size slots of preallocated slab files below ``extra_config.path`` (see :class:`SlabOptions`).

    ``raw_store()`` reaches stored records behind the backend's back (for the conformance suite,
    tools and tests); ``slab_files()`` lists the open files.
    """

    Options = SlabOptions
    raw_baseline_class = RawSlab
    capabilities = Capabilities(
        zero_copy=True,
        persistent=True,
        shared=True,
        may_evict=True,
        supports_delete=True,
        supports_clear=True,
        verifies_integrity=True,
    )

    def __init__(self, config: HiCacheStorageConfig) -> None:
        super().__init__(config)
        options = self.options
        self.root = resolve_root(options)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError("extra_config.path", f"cannot create directory {str(self.root)!r}: {error}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ConfigError("extra_config.path", f"directory {str(self.root)!r} is not writable")
        self._root = str(self.root)
        self._fsync = options.fsync
        self._io = IoThreads(io_thread_count(options))
        self._slabs: dict[str, Slab] = {}
        self._slabs_lock = threading.Lock()
        self._open_failures: dict[str, tuple[float, str]] = {}
        capacity = options.capacity_bytes + sum((options.pool_capacity_bytes or {}).values())
        self.stats.watch_evictions(capacity, "slab backend (capacity_bytes)")

    # ------------------------------------------------------------ slabs
    @property
    def io_threads(self) -> int:
        """Threads that move the pages of one batch (``extra_config.io_threads`` resolved)."""
        return self._io.threads

    def slab(self, keyspace: KeySpace) -> Slab:
        """The slab of ``keyspace``, opened (and created or re-created if needed) on first use.

        Raises :class:`BackendFault` when it cannot be opened; for :data:`RETRY_OPEN_S` seconds after
        that, without trying again.
        """
        prefix = keyspace.prefix
        slab = self._slabs.get(prefix)
        if slab is not None:
            return slab
        with self._slabs_lock:
            slab = self._slabs.get(prefix)
            if slab is not None:
                return slab
            failure = self._open_failures.get(prefix)
            if failure is not None and time.monotonic() < failure[0]:
                raise BackendFault(failure[1])
            options = self.options
            geometry = Geometry.plan(
                keyspace.page_bytes, options.capacity_for(keyspace.pool), options.ways, options.file_bytes
            )
            try:
                slab = Slab(
                    self._root,
                    prefix,
                    geometry,
                    direct_io=options.direct_io,
                    durable=options.fsync,
                    zero_fill=options.zero_fill,
                    bump=self.stats.bump,
                )
            except OSError as error:
                message = (
                    f"cannot open the slab of {prefix!r} ({geometry.total_bytes} bytes) in {self._root!r}: {error}"
                )
                self._open_failures[prefix] = (time.monotonic() + RETRY_OPEN_S, message)
                self.stats.bump("slab_open_failures")
                raise BackendFault(message) from error
            self._open_failures.pop(prefix, None)
            self._slabs[prefix] = slab
            return slab

    def slab_files(self) -> list[SlabFile]:
        """Every slab file this instance has open."""
        with self._slabs_lock:
            return [file for slab in self._slabs.values() for file in slab.files]

    def on_register_pool(self, pool: Any, keyspace: KeySpace) -> None:
        """Preallocate the pool's slab now, so a capacity the disk cannot hold fails at start-up."""
        if keyspace.page_bytes <= 0:  # a pool that holds no bytes never reaches the primitives
            return
        try:
            self.slab(keyspace)
        except BackendFault as fault:
            cause = fault.__cause__
            option = "extra_config.path"
            if isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
                option = "extra_config.capacity_bytes"
                free = shutil.disk_usage(self._root).free
                raise ConfigError(option, f"{fault} (free space: {free} bytes)") from None
            raise ConfigError(option, str(fault)) from None

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        slab = self.slab(context.keyspace)
        if not self._fsync:

            def write(key: str, page: list[memoryview]) -> bool:
                plan = slab.stage(key, page)
                return plan is not None and slab.commit(plan)

            return self._io.map(write, keys, pages)

        # Durable batch: every payload is synced before any header commits it, headers synced before the
        # ack. Pages are sent in waves with at most ``ways`` pages of one set each, so a page this batch
        # evicts has been committed first.
        def stage(key: str, page: list[memoryview]) -> WritePlan | Exception | None:
            try:
                return slab.stage(key, page)
            except Exception as error:  # raised below, once every staged slot is released
                return error

        results = [False] * len(keys)
        for wave in _waves(slab, keys):
            staged = self._io.map(stage, [keys[i] for i in wave], [pages[i] for i in wave])
            try:
                failure = next((item for item in staged if isinstance(item, Exception)), None)
                if failure is not None:
                    raise failure
                slab.sync()
                for index, plan in zip(wave, staged, strict=True):
                    results[index] = isinstance(plan, WritePlan) and slab.commit(plan)
                slab.sync()
            finally:
                for plan in staged:
                    if isinstance(plan, WritePlan):
                        slab.finish(plan)
        return results

    def read_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        slab = self.slab(context.keyspace)
        return self._io.map(slab.read, keys, pages)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        slab = self.slab(context.keyspace)
        return [slab.exists(key) for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        slab = self.slab(context.keyspace)
        for key in keys:
            slab.delete(key)
        if self._fsync:
            slab.sync()
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None = None) -> None:
        """Empty the slabs of the key spaces in ``prefixes`` (``None``: every slab file below the path).

        A key space's slab holds the pages of all its ranks, so all of them go.
        """
        wanted = None if prefixes is None else tuple(prefixes)
        with self._slabs_lock:
            slabs = [s for p, s in self._slabs.items() if wanted is None or p in wanted]
        done: set[str] = set()
        for slab in slabs:
            slab.clear()
            done.update(file.path for file in slab.files)
        for entry in os.scandir(self._root):
            name = entry.name
            if SLAB_FILE_MARK not in name or name.startswith(".") or entry.path in done:
                continue
            if wanted is not None and not name.startswith(wanted):
                continue
            if entry.is_file(follow_symlinks=False):
                _blank_slab_file(entry.path)

    def release(self) -> None:
        self._io.close()
        with self._slabs_lock:
            for slab in self._slabs.values():
                slab.close()
            self._slabs.clear()

    # ------------------------------------------------------------ side channel
    def raw_store(self) -> SlotStore:
        """Stored records by storage key, behind the backend's back (see :class:`SlotStore`)."""
        return SlotStore(self)


class SlotStore:
    """The record a read of a storage key would use: its 64-byte slot header, then the page bytes.

    ``get(key)`` returns it (``None`` when no committed copy is found, whatever its bytes hold);
    ``store[key] = data`` writes ``data`` over it in place, header first, the rest zero-filled (to
    damage or truncate a page); ``pop(key)`` blanks the key's headers. Only keys of key spaces this
    instance has opened are found.
    """

    def __init__(self, backend: SlabBackend) -> None:
        self._backend = backend

    def _slab_of(self, key: str) -> Slab | None:
        with self._backend._slabs_lock:
            for prefix, slab in self._backend._slabs.items():
                if key.startswith(prefix):
                    return slab
        return None

    def get(self, key: str, default: bytes | None = None) -> bytes | None:
        slab = self._slab_of(key)
        where = slab.locate(key) if slab is not None else None
        if slab is None or where is None:
            return default
        file, header_offset, slot_offset = where
        header = os.pread(file.fd, ENTRY_SIZE, header_offset)
        return header + os.pread(file.fd, slab.geometry.page_bytes, slot_offset)

    def __getitem__(self, key: str) -> bytes:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, data: bytes) -> None:
        slab = self._slab_of(key)
        where = slab.locate(key) if slab is not None else None
        if slab is None or where is None:
            raise KeyError(f"no stored copy of {key!r} to overwrite")
        file, header_offset, slot_offset = where
        page_bytes = slab.geometry.page_bytes
        if len(data) > ENTRY_SIZE + page_bytes:
            raise ValueError(f"a record holds at most {ENTRY_SIZE + page_bytes} bytes, got {len(data)}")
        record = bytes(data) + bytes(ENTRY_SIZE + page_bytes - len(data))
        os.pwrite(file.fd, record[ENTRY_SIZE:], slot_offset)
        os.pwrite(file.fd, record[:ENTRY_SIZE], header_offset)

    def pop(self, key: str, default: bytes | None = None) -> bytes | None:
        found = self.get(key, default)
        slab = self._slab_of(key)
        if slab is not None:
            slab.delete(key)
        return found

    def __delitem__(self, key: str) -> None:
        if self.pop(key) is None:
            raise KeyError(key)


def _waves(slab: Slab, keys: Sequence[str]) -> list[list[int]]:
    """Indices of ``keys`` in waves that hold at most ``ways`` keys of any one set (one wave, usually)."""
    seen: dict[tuple[int, int], int] = {}
    waves: list[list[int]] = []
    ways = slab.geometry.ways
    for index, key in enumerate(keys):
        where = slab.set_of(key)
        count = seen.get(where, 0)
        seen[where] = count + 1
        wave = count // ways
        while len(waves) <= wave:
            waves.append([])
        waves[wave].append(index)
    return waves


def _blank_slab_file(path: str) -> None:
    """Empty a slab file this instance does not have open (skipped when it is not a valid slab file)."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    try:
        try:
            geometry, _index, _tag = parse_superblock(os.pread(fd, 4096, 0))
        except SuperblockError:
            return
        blank_headers(fd, geometry)
    finally:
        os.close(fd)
