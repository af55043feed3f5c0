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

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendFault,
    BackendSetup,
    BatchContext,
    ConfigError,
    HostPool,
    KeySpace,
    PageBuffers,
)
from hicache_storage.plugin.io_threads import IoThreads

from .layout import Geometry, SuperblockError, parse_superblock
from .options import SlabOptions, io_thread_count, resolve_root
from .raw_baseline import RawSlab
from .slab import Slab, WritePlan, blank_headers
from .slab_files import SLAB_FILE_MARK, SlabFile

__all__ = ["SlabBackend"]

#: Seconds a key space whose slab could not be opened (disk full, I/O error) fails fast before a retry.
RETRY_OPEN_S = 5.0


class SlabBackend(Backend[SlabOptions]):
    """Pages in fixed-size slots of preallocated slab files below ``extra_config.path`` (see :class:`SlabOptions`).

    ``root`` is that directory; ``slab(keyspace)`` is a key space's slab, ``open_slabs()`` and
    ``slab_files()`` list what this instance has open (for tools: :class:`~hicache_storage_slab.SlotStore`
    reaches stored records through them).
    """

    Options = SlabOptions
    raw_baseline_class = RawSlab
    capabilities = SHARED_STORE.with_overrides({"zero_copy": True, "may_evict": True, "supports_list": False})

    def __init__(self, setup: BackendSetup[SlabOptions]) -> None:
        options = setup.options
        self._options = options
        self._counters = setup.counters
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
        setup.counters.watch_evictions(capacity, "slab backend (capacity_bytes)")

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
            options = self._options
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
                    bump=self._counters.bump,
                )
            except OSError as error:
                message = (
                    f"cannot open the slab of {prefix!r} ({geometry.total_bytes} bytes) in {self._root!r}: {error}"
                )
                self._open_failures[prefix] = (time.monotonic() + RETRY_OPEN_S, message)
                self._counters.bump("slab_open_failures")
                raise BackendFault(message) from error
            self._open_failures.pop(prefix, None)
            self._slabs[prefix] = slab
            return slab

    def open_slabs(self) -> list[Slab]:
        """Every slab this instance has open (one per key space used so far)."""
        with self._slabs_lock:
            return list(self._slabs.values())

    def slab_files(self) -> list[SlabFile]:
        """Every slab file this instance has open."""
        return [file for slab in self.open_slabs() for file in slab.files]

    def on_register_pool(self, pool: HostPool, keyspace: KeySpace) -> None:
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
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        slab = self.slab(context.keyspace)
        if not self._fsync:

            def write(key: str, page: PageBuffers) -> bool:
                plan = slab.stage(key, page)
                return plan is not None and slab.commit(plan)

            return self._io.map(write, keys, pages)

        # Durable batch: every payload is synced before any header commits it, headers synced before the
        # ack. Pages are sent in waves with at most ``ways`` pages of one set each, so a page this batch
        # evicts has been committed first.
        def stage(key: str, page: PageBuffers) -> WritePlan | Exception | None:
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

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
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
