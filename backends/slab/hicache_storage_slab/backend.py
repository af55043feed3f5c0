"""The slab backend: a local flash cache of fixed-size slots in preallocated files.

Every key space (one per pool: KV, and each sidecar pool with its own page size) has its own slab
below ``extra_config.path``, sized by ``capacity_bytes`` and preallocated (``posix_fallocate``) when
the key space is first used; records of another size (a key space's manifest) go to a small slab of
their own (:mod:`~hicache_storage_slab.registry`). Each slot header names its storage key, so the
slabs list themselves (usage, purge), and a slab left empty is removed when the last process closes it.
A key lives in one of the ``ways`` slots of the set its digest selects;
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
    StoredPage,
    keyspace_prefix_of,
)
from hicache_storage.plugin.io_threads import IoThreads
from hicache_storage.plugin.page_format import record_codec

from .header_area import blank_headers
from .layout import SUPERBLOCK_SIZE, LegacyLayoutError, SuperblockError, parse_superblock
from .listing import list_slab_pages, slab_prefixes
from .options import SlabOptions, io_thread_count, resolve_root
from .raw_baseline import RawSlab
from .registry import SlabRegistry
from .slab import Slab, WritePlan
from .slab_files import SlabFile, remove_if_unused

__all__ = ["SlabBackend"]


class SlabBackend(Backend[SlabOptions]):
    """Pages in fixed-size slots of preallocated slab files below ``extra_config.path`` (see :class:`SlabOptions`).

    ``root`` is that directory; ``slab(keyspace)`` is a key space's slab, ``open_slabs()`` and
    ``slab_files()`` list what this instance has open (for tools: :class:`~hicache_storage_slab.SlotStore`
    reaches stored records through them).
    """

    Options = SlabOptions
    raw_baseline_class = RawSlab
    capabilities = SHARED_STORE.with_overrides({"zero_copy": True, "may_evict": True})

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
        self._slabs = SlabRegistry(self._root, options, record_codec(options), setup.counters)
        self._io = IoThreads(io_thread_count(options))
        capacity = options.capacity_bytes + sum((options.pool_capacity_bytes or {}).values())
        setup.counters.watch_evictions(capacity, "slab backend (capacity_bytes)")

    # ------------------------------------------------------------ slabs
    @property
    def io_threads(self) -> int:
        """Threads that move the pages of one batch (``extra_config.io_threads`` resolved)."""
        return self._io.threads

    def slab(self, keyspace: KeySpace) -> Slab:
        """The slab of ``keyspace``, opened (and created or re-created if needed) on first use.

        Raises :class:`BackendFault` when it cannot be opened (and for a few seconds after that,
        without trying again), :class:`ConfigError` when the path holds slab files of an earlier layout.
        """
        return self._slabs.slab(keyspace)

    def open_slabs(self) -> list[Slab]:
        """Every slab this instance has open (one per key space used so far, and its record slabs)."""
        return self._slabs.open_slabs()

    def slab_files(self) -> list[SlabFile]:
        """Every slab file this instance has open."""
        return [file for slab in self.open_slabs() for file in slab.files]

    def _batch_slab(self, keys: Sequence[str], context: BatchContext, *, create: bool) -> Slab | None:
        """The slab of a batch: the key space's own, or its records' of another size (``context.page_bytes``).

        A batch of the operator's raw context (a key space of no pages) is routed by its first key's
        prefix. ``None``: a record slab that does not exist and ``create`` is false.
        """
        space = context.keyspace
        prefix = space.prefix
        if keys and not keys[0].startswith(prefix):
            prefix = keyspace_prefix_of(keys[0]) or prefix
        if prefix == space.prefix and context.page_bytes == space.page_bytes:
            return self.slab(space)
        return self._slabs.record_slab(prefix, context.page_bytes, create=create)

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
        slab = self._batch_slab(keys, context, create=True)
        assert slab is not None
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
        slab = self._batch_slab(keys, context, create=False)
        return [False] * len(keys) if slab is None else self._io.map(slab.read, keys, pages)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        slab = self._batch_slab(keys, context, create=False)
        return [False] * len(keys) if slab is None else [slab.exists(key) for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Blank the keys' headers; keys of any key space (an operator's purge names them by storage key)."""
        groups: dict[str, list[str]] = {}
        for key in keys:
            groups.setdefault(keyspace_prefix_of(key) or context.keyspace.prefix, []).append(key)
        for prefix, members in groups.items():
            for slab in self._slabs.stored(prefix):  # the pages' slab and its record slabs
                for key in members:
                    slab.delete(key)
                if self._fsync:
                    slab.sync()
        return [True] * len(keys)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Pages of every slab below the path, from their slot headers, in key order."""
        return list_slab_pages(self._root, prefix, cursor, limit)

    def clear_pages(self, prefixes: Sequence[str] | None = None) -> None:
        """Empty the slabs of the key spaces in ``prefixes`` (``None``: every slab file below the path).

        A key space's slab holds the pages of all its ranks, so all of them go.
        """
        wanted = None if prefixes is None else tuple(prefixes)
        slabs = [slab for slab in self.open_slabs() if wanted is None or slab.prefix.startswith(wanted)]
        done: set[str] = set()
        for slab in slabs:
            slab.clear()
            done.update(file.path for file in slab.files)
        for name, paths in slab_prefixes(self._root).items():
            if wanted is not None and not name.startswith(wanted):
                continue
            for path in paths:
                if path not in done:
                    _blank_slab_file(path)
            remove_if_unused(self._root, name)

    def release(self) -> None:
        """Close every slab; those left empty that no other process has open are removed from the disk."""
        self._io.close()
        for name in self._slabs.close():
            try:
                remove_if_unused(self._root, name)
            except OSError as error:
                self._counters.note(f"could not remove the empty slab of {name!r}: {error}")


def _waves(slab: Slab, keys: Sequence[str]) -> list[list[int]]:
    """Indices of ``keys`` in waves that hold at most ``ways`` keys of any one set (one wave, usually)."""
    seen: dict[tuple[int, int], int] = {}
    waves: list[list[int]] = []
    ways = slab.geometry.ways
    for index, key in enumerate(keys):
        counts = []
        for where in slab.sets_of(key):  # counted in every set the key may go to
            counts.append(seen.get(where, 0))
            seen[where] = counts[-1] + 1
        wave = max(counts) // ways
        while len(waves) <= wave:
            waves.append([])
        waves[wave].append(index)
    return waves


def _blank_slab_file(path: str) -> None:
    """Empty a slab file this instance does not have open; a file of an earlier layout is removed, one
    that is no slab file is left alone."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return
    try:
        try:
            geometry, _index, _tag = parse_superblock(os.pread(fd, SUPERBLOCK_SIZE, 0))
        except LegacyLayoutError:
            os.unlink(path)
            return
        except SuperblockError:
            return
        blank_headers(fd, geometry)
    finally:
        os.close(fd)
