"""The slab backend: a local flash cache of one preallocated store shared by every key space.

``extra_config.path`` holds one store of ``capacity_bytes`` (data files, index, lock files), created
and preallocated when a pool is first registered (or a page first written), shared by every key space
and pool (KV pages, sidecar pools, manifests) of every model and process that uses the path. The
data area is lent to page sizes a region at a time; replacement is least recently used over the whole
store (see :mod:`~hicache_storage_slab.allocator`). The index (:mod:`~hicache_storage_slab.index`) is
shared by the host's processes, so each sees the others' pages, and a restarted process sees what
was written before. Writes ``pwritev`` straight from host memory and become visible only once the
index commits them; reads ``preadv`` straight into host memory and verify length and XXH3 checksum.
An empty store is removed when the last process closes it.
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
    StoredPage,
)
from hicache_storage.plugin.io_threads import IoThreads
from hicache_storage.plugin.page_format import record_codec

from .options import SlabOptions, io_thread_count, resolve_root
from .raw_baseline import RawSlab
from .store import Store, WriteSettings
from .store_files import (
    DataFile,
    LegacyLayoutError,
    StoreMismatch,
    StoreSettings,
    attach_direct,
    close_store,
    legacy_files,
    open_store,
)

__all__ = ["CLOSE_WAIT_S", "RETRY_OPEN_S", "SlabBackend"]

#: Seconds :meth:`SlabBackend.release` waits for writes in flight (a caller may have abandoned them).
CLOSE_WAIT_S = 5.0
#: Seconds a store that could not be opened (disk full, I/O error) fails fast before a retry.
RETRY_OPEN_S = 5.0


class SlabBackend(Backend[SlabOptions]):
    """Pages in slots of one preallocated store below ``extra_config.path`` (see :class:`SlabOptions`).

    ``root`` is that directory; :meth:`store` the open store (for tools: :class:`~hicache_storage_slab.SlotStore`
    reaches stored pages through it).
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
        extra = setup.config.extra_config or {}
        namespace = extra.get("namespace", "")
        self._writer = WriteSettings(
            namespace=namespace if isinstance(namespace, str) else "",
            pinned=extra.get("pinned") is True,
            quota_bytes=options.quota_bytes,
            read_recency_s=options.read_recency_s,
            durable=options.fsync,
        )
        self._codec = record_codec(options)
        self._io = IoThreads(io_thread_count(options))
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._failure: tuple[float, str] | None = None
        setup.counters.watch_evictions(options.capacity_bytes, "slab backend (capacity_bytes)")

    # ------------------------------------------------------------ the store
    @property
    def io_threads(self) -> int:
        """Threads that move the pages of one batch (``extra_config.io_threads`` resolved)."""
        return self._io.threads

    def store(self, page_bytes: int = 0, *, create: bool = True) -> Store | None:
        """The open store, opened (created when ``create``) on first use; ``None`` when there is none
        and ``create`` is false. ``page_bytes`` sizes the index of a store created now.

        Raises :class:`BackendFault` when it cannot be opened (and for :data:`RETRY_OPEN_S` seconds after
        that without trying again), :class:`ConfigError` when the path holds an earlier layout's files or
        a store of other options that another process has open.
        """
        store = self._store
        if store is not None:
            return store
        with self._lock:
            if self._store is not None:
                return self._store
            if self._failure is not None and time.monotonic() < self._failure[0]:
                raise BackendFault(self._failure[1])
            options = self._options
            settings = StoreSettings(
                options.capacity_bytes,
                options.region_bytes,
                options.file_bytes,
                options.index_bytes,
                page_bytes or 4096,
                options.fsync,
                options.zero_fill,
            )
            try:
                opened = open_store(self._root, settings, create=create, bump=self._counters.bump)
            except LegacyLayoutError as error:
                listed = " ".join(error.files[:3]) + (" ..." if len(error.files) > 3 else "")
                raise ConfigError(
                    "extra_config.path",
                    f"{self._root!r} holds {len(error.files)} slab files of an earlier layout ({listed}): they hold "
                    f"cached pages only; remove them (rm {os.path.join(self._root, '*slab-*')} "
                    f"{os.path.join(self._root, '*slab.lock')}) and this version creates its store anew",
                ) from None
            except StoreMismatch as error:
                raise ConfigError(
                    "extra_config.capacity_bytes",
                    f"the store at {self._root!r} was made with {error} and another process has it open; "
                    "give the same options, or stop those processes to re-create it",
                ) from None
            except OSError as error:
                message = f"cannot open the slab store in {self._root!r} ({options.capacity_bytes} bytes): {error}"
                self._failure = (time.monotonic() + RETRY_OPEN_S, message)
                self._counters.bump("store_open_failures")
                raise BackendFault(message) from error
            if opened is None:
                return None
            self._failure = None
            if options.direct_io:
                attach_direct(opened.files, self._counters.bump)
            self._store = Store(opened, self._writer, self._codec, self._counters.bump, self._io)
            return self._store

    def data_files(self) -> list[DataFile]:
        """The data files of the open store (none before it is opened)."""
        return [] if self._store is None else self._store.files

    def on_register_pool(self, pool: HostPool, keyspace: KeySpace) -> None:
        """Open (create and preallocate) the store now, so a capacity the disk cannot hold fails at start-up."""
        if keyspace.page_bytes <= 0:  # a pool that holds no bytes never reaches the primitives
            return
        try:
            self.store(keyspace.page_bytes)
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
        store = self.store(context.page_bytes)
        assert store is not None
        parent = context.parent_storage_key() if context.record_bytes is None else None
        return store.write(keys, pages, context.page_bytes, parent)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        store = self.store(create=False)
        return [False] * len(keys) if store is None else store.read(keys, pages)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        store = self.store(create=False)
        return [False] * len(keys) if store is None else store.exists(keys)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Remove pages of any key space (an operator's purge names them by storage key)."""
        store = self.store(create=False)
        if store is not None:
            store.delete(keys)
        return [True] * len(keys)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Pages of the store whose keys start with ``prefix``, from its index (in index order)."""
        store = self.store(create=False)
        return ([], None) if store is None else store.listing(prefix, cursor, limit)

    def clear_pages(self, prefixes: Sequence[str] | None = None) -> None:
        """Remove the pages of the key spaces in ``prefixes`` (``None``: every page of the store, and any
        slab files of an earlier layout)."""
        if prefixes is None:
            for path in legacy_files(self._root):
                os.unlink(path)
        store = self.store(create=False)
        if store is not None:
            store.clear(None if prefixes is None else list(prefixes))

    def release(self) -> None:
        """Close the store; the last process to close an empty store removes its files."""
        store, self._store = self._store, None
        if store is not None and not store.wait_idle(CLOSE_WAIT_S):
            self._counters.note("slab store closed with writes still in flight; their slots are given back")
        self._io.close()
        if store is None:
            return
        try:
            store.opened.index.drop_own_claims()
            close_store(store.opened, durable=self._options.fsync)
        except OSError as error:
            self._counters.note(f"could not close the slab store in {self._root!r}: {error}")
