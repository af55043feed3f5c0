"""The file backend: one checksummed page file per storage key, published atomically.

A page file is the payload followed by the 24-byte :mod:`hicache_storage.plugin.page_format` header as a
trailer (magic, version, payload length, XXH3-64), so the payload starts at file offset 0: the
kernel copies page-cache pages to host memory at the same alignment as a plain file would.

Writes go to a unique temp file in the page's directory (``os.writev`` of the page segments straight
from host memory, then the trailer), are optionally fsynced, and are renamed onto the final name, so
a reader or ``exists`` sees either no page or a whole one, even with several processes writing the
same key. Reads open only regular files (never following a symbolic link, never blocking on a FIFO),
``os.preadv`` straight into the page segments and verify the file size, the trailer (including the
digest of the storage key the record was written under) and the checksum; any mismatch is a miss
counted as ``integrity_failures``. Each page of a batch succeeds or fails on its own.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import replace

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendSetup,
    BatchContext,
    Capabilities,
    ConfigError,
    PageBuffers,
    StoredPage,
)
from hicache_storage.plugin.io_threads import IoThreads
from hicache_storage.plugin.page_format import HEADER_SIZE, PageRecordError, record_codec
from hicache_storage.plugin.vectored_io import LeftoverTemps, preadv_all, publish_file

from .eviction import SizeLimit
from .footprint import Footprint, choose_fanout
from .layout import PageLayout
from .listing import list_page_files
from .options import FileOptions, resolve_root
from .raw_baseline import RawFiles

__all__ = ["FileBackend"]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
#: Never block on a FIFO or follow a link planted at a page path (both read as misses).
_READ_FLAGS = os.O_RDONLY | _CLOEXEC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)


class FileBackend(Backend[FileOptions]):
    """Pages as files below ``extra_config.path`` (see :class:`FileOptions`).

    Directories are created with mode 0o700 and page files with 0o600. ``root`` is the storage
    root; ``layout.path_for(storage_key)`` gives the file of a page (for tools that inspect stored
    pages). With ``read_only``, the root may be read-only: writes return ``False`` without touching it.
    """

    Options = FileOptions
    #: Plain file I/O in ``<path>/raw-baseline`` for ``hicache-storage bench`` to compare with.
    raw_baseline_class = RawFiles
    capabilities = SHARED_STORE.with_overrides({"zero_copy": True})

    def __init__(self, setup: BackendSetup[FileOptions]) -> None:
        options = setup.options
        self._counters = setup.counters
        self.root = resolve_root(options)
        root = str(self.root)
        self._read_only = options.read_only
        self._codec = record_codec(options)
        if self._read_only:
            if not self.root.is_dir() or not os.access(self.root, os.R_OK | os.X_OK):
                raise ConfigError(
                    "extra_config.path", f"directory {str(self.root)!r} does not exist or is not readable"
                )
        else:
            try:
                PageLayout(root, 0).ensure_directory(root)
            except OSError as error:
                raise ConfigError("extra_config.path", f"cannot create directory {str(self.root)!r}: {error}") from None
            if not os.access(self.root, os.W_OK | os.X_OK):
                raise ConfigError(
                    "extra_config.path", f"directory {str(self.root)!r} is not writable (read_only: true reads it)"
                )
        footprint = Footprint(root)
        #: Where each storage key's page file goes below ``root``.
        self.layout = PageLayout(root, choose_fanout(root, options.fanout_levels, options.max_bytes, footprint.block))
        self._path_for = self.layout.path_for
        self._fsync = options.fsync
        #: Threads that move the pages of one batch (``extra_config.io_threads`` resolved).
        self.io_threads = options.io_threads if options.io_threads is not None else min(4, os.cpu_count() or 1)
        self._threads = IoThreads(self.io_threads)
        self._nonce = secrets.token_hex(4)
        self._counter = itertools.count()
        self._leftovers = LeftoverTemps()
        self._eviction: SizeLimit | None = None
        if options.max_bytes is not None:
            self._eviction = SizeLimit(options.max_bytes, self.layout, footprint)
            self._eviction.seed(self._existing_pages(), self.layout.iter_fanout_directories())
            self.layout.on_directory = self._eviction.directory_created
            self._counters.watch_evictions(options.max_bytes, "file backend (max_bytes)")

    @classmethod
    def capabilities_for(cls, options: FileOptions) -> Capabilities:
        """With ``max_bytes`` the backend evicts pages on its own; ``read_only`` removes nothing."""
        declared = cls.capabilities
        if options.read_only:
            return replace(declared, supports_delete=False, supports_clear=False)
        return replace(declared, may_evict=True) if options.max_bytes is not None else declared

    # ------------------------------------------------------------ helpers
    def _integrity_failure(self) -> bool:
        self._counters.bump("integrity_failures")
        return False

    def _existing_pages(self) -> list[tuple[str, int, float]]:
        found = []
        for path, is_temp in self.layout.iter_owned_files():
            if is_temp:
                continue
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(path)
                found.append((path, info.st_size, info.st_mtime))
        return found

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        if self._read_only:
            self._counters.bump("read_only_writes_refused", len(keys))
            return [False] * len(keys)
        directories: set[str] = set()
        errors: list[BaseException] = []

        def write(key: str, page: PageBuffers) -> bool:
            try:
                return self._write_one(key, page, directories)
            except OSError as error:  # this page fails; the others of the batch go on
                errors.append(error)
                return False

        results = self._threads.map(write, keys, pages)
        if errors:
            if len(errors) == len(keys):
                raise errors[0]  # nothing was stored: a fault of the call, for the resilience policy
            self._counters.bump("key_faults", len(errors))
            self._counters.note(f"set: {type(errors[0]).__name__}: {errors[0]}"[:500])
        if self._fsync:
            for directory in directories:
                _fsync_directory(directory)
        if self._eviction is not None:
            size = HEADER_SIZE + context.page_bytes
            parent = _parent_key(context)
            self._eviction.record_batch(
                [(self._path_for(key), size if ok else None) for key, ok in zip(keys, results, strict=True)],
                parent=self._path_for(parent) if parent is not None and len(keys) else None,
            )
            evicted = self._eviction.evict(self._unlink_files)
            if evicted:
                self._counters.bump("evictions", evicted)
        return results

    def _write_one(self, key: str, page: PageBuffers, directories: set[str]) -> bool:
        layout = self.layout
        directory = layout.directory_for(key)
        name = layout.file_name(key)
        final = f"{directory}/{name}"
        temp = f"{directory}/{layout.temp_name(name, f'{os.getpid()}-{self._nonce}-{next(self._counter)}')}"
        trailer = self._codec.header(key, page)
        size = HEADER_SIZE + sum(segment.nbytes for segment in page)
        make_directory = lambda: layout.ensure_directory(directory)  # noqa: E731 (only if the directory is missing)
        publish_file(
            temp,
            final,
            [*page, trailer],
            size,
            fsync=self._fsync,
            make_directory=make_directory,
            leftovers=self._leftovers,
        )
        directories.add(directory)
        if self._eviction is not None and not self._eviction.fits(final, size):
            self._remove(final)
            return False
        return True

    def _unlink_files(self, paths: Sequence[str]) -> None:
        """Remove files spread over the I/O threads (an unlink waits on the disk more than on the CPU)."""
        self._threads.map(_unlink_quietly, paths, paths)  # map passes pairs; the second is not used

    def release(self) -> None:
        self._threads.close()
        if self._leftovers.sweep():
            self._counters.note(f"{len(self._leftovers)} temp file(s) of failed writes could not be removed")

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self._threads.map(self._read_one, keys, pages)

    def _read_one(self, key: str, page: PageBuffers) -> bool:
        try:
            fd = os.open(self._path_for(key), _READ_FLAGS)
        except FileNotFoundError:
            return False
        except OSError as error:  # ELOOP: a symbolic link at the page path
            if error.errno in _NOT_A_PAGE:
                return self._integrity_failure()
            raise
        trailer = bytearray(HEADER_SIZE + 1)  # the extra byte is filled only when the file is too long
        expected = sum(segment.nbytes for segment in page)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, device or directory is never a page
                return self._integrity_failure()
            count = preadv_all(fd, [*page, trailer])
        finally:
            os.close(fd)
        if count != HEADER_SIZE + expected:
            return self._integrity_failure()
        try:
            parsed = self._codec.check_header(trailer, key, expected)
        except PageRecordError:
            return self._integrity_failure()
        if not self._codec.verify(parsed, key, page):
            return self._integrity_failure()
        return True

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        path_for = self.layout.path_for
        results = []
        for key in keys:
            try:
                info = os.lstat(path_for(key))
            except FileNotFoundError:
                results.append(False)
            else:
                results.append(stat.S_ISREG(info.st_mode) and info.st_size == want)
        return results

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        paths = [self.layout.path_for(key) for key in keys]
        for path in paths:
            self._remove(path)
        self._remove_empty_directories(paths)
        return [True] * len(keys)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Page files in path order (size and modification time from ``stat``)."""
        return list_page_files(str(self.root), prefix, cursor, limit)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove the page files (and temp files) of the key spaces ``prefixes`` (``None``: of every key space)."""
        names = None if prefixes is None else tuple(prefixes)
        temps = None if names is None else tuple("." + name[:40] for name in names)
        removed = []
        for path, is_temp in self.layout.iter_owned_files():
            if names is not None and temps is not None:
                name = os.path.basename(path)
                if not (name.startswith(temps) if is_temp else name.startswith(names)):
                    continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            removed.append(path)
        if self._eviction is not None:
            if names is None:
                self._eviction.reset()
            else:
                for path in removed:
                    self._eviction.record_removal(path)
        self._remove_empty_directories(removed)

    # ------------------------------------------------------------ eviction
    def _remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if self._eviction is not None:
            self._eviction.record_removal(path)

    def _remove_empty_directories(self, paths: Sequence[str]) -> None:
        """Remove the directories of ``paths`` (deepest first) and their parents that are now empty."""
        for directory in sorted({os.path.dirname(path) for path in paths}, key=len, reverse=True):
            removed = self.layout.remove_empty_directories(directory)
            if removed and self._eviction is not None:
                self._eviction.directories_removed(removed)


#: ``open`` errors meaning "something that is not a page file sits at the page path".
_NOT_A_PAGE = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO})


def _unlink_quietly(path: str, _unused: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parent_key(context: BatchContext) -> str | None:
    """Storage key of the page before the batch (``extra_info.prefix_keys``), when the caller named a valid one."""
    try:
        return context.parent_storage_key()
    except ValueError:
        return None
