"""A store's files: creating and preallocating them, opening them, and removing them when unused.

Every process that opens the store holds a shared ``flock`` on its first data file until it closes it
("in use"); creating, re-creating and removing the store happen under the exclusive ``flock`` of
``slab.lock``, so they never meet a process opening it. ``slab.state`` is written last when a store
is created: a directory holding store files without it holds the remains of a creation that failed,
which the next opening removes.

``slab.state`` also records the host's boot id when the store was last opened and whether the last
process to close it flushed everything (``clean``). A store opened after the host restarted whose last
close was not clean (a power loss, a crash of the host) starts with an empty index unless it is
durable (``fsync``): its index was not flushed and may be damaged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .geometry import BLOCK, StoreGeometry
from .index import SlabIndex, open_index

__all__ = [
    "DATA_PREFIX",
    "INDEX_NAME",
    "LAYOUT",
    "LegacyLayoutError",
    "OpenStore",
    "StoreMismatch",
    "StoreSettings",
    "close_store",
    "legacy_files",
    "open_store",
    "store_paths",
]

LAYOUT = 3
STATE_NAME = "slab.state"
LOCK_NAME = "slab.lock"
INDEX_NAME = "slab.index"
DATA_PREFIX = "slab.data-"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECT = getattr(os, "O_DIRECT", 0)
#: File names of the per-key-space layouts (1 and 2): ``<prefix>slab-<i>``, ``<prefix>slab.lock``.
_LEGACY = re.compile(r".+slab-\d+|.+slab\.lock")

Bump = Callable[[str], None]


class LegacyLayoutError(Exception):
    """The directory holds slab files of an earlier layout (``files``: their paths)."""

    def __init__(self, files: list[str]) -> None:
        super().__init__(f"{len(files)} slab files of an earlier layout")
        self.files = files


class StoreMismatch(Exception):
    """The store on disk was created with other settings and another process has it open."""


#: The options that shape a store: opened with others, it is re-created.
SHAPE = ("capacity_bytes", "region_bytes", "file_bytes", "index_bytes")


@dataclass(frozen=True)
class StoreSettings:
    """What a store is created with (the options that shape it, and the first page size it serves)."""

    capacity_bytes: int
    region_bytes: int
    file_bytes: int
    index_bytes: int | None
    page_bytes: int
    durable: bool
    zero_fill: bool

    def shape(self) -> dict[str, Any]:
        """The options a store on disk must have been created with to be reused (:data:`SHAPE`)."""
        return {name: getattr(self, name) for name in SHAPE}


@dataclass
class DataFile:
    """One open data file: a buffered descriptor, and an ``O_DIRECT`` one where that works."""

    path: str
    fd: int
    direct_fd: int | None = None

    def descriptors(self) -> list[int]:
        return [self.fd] if self.direct_fd is None else [self.fd, self.direct_fd]

    def close(self) -> None:
        for fd in self.descriptors():
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class OpenStore:
    """A store this process has open: its geometry, data files and index."""

    root: str
    geometry: StoreGeometry
    files: list[DataFile]
    index: SlabIndex
    state: dict[str, Any] = field(default_factory=dict)


def store_paths(root: str) -> list[str]:
    """Every file of the store below ``root`` that exists (the lock file last)."""
    names = [STATE_NAME, INDEX_NAME, INDEX_NAME + "-lock"]
    with contextlib.suppress(FileNotFoundError), os.scandir(root) as entries:
        names += sorted(entry.name for entry in entries if entry.name.startswith(DATA_PREFIX))
    names.append(LOCK_NAME)
    return [os.path.join(root, name) for name in names if os.path.lexists(os.path.join(root, name))]


def legacy_files(root: str) -> list[str]:
    """Paths of slab files of the per-key-space layouts below ``root``."""
    with contextlib.suppress(FileNotFoundError), os.scandir(root) as entries:
        return sorted(entry.path for entry in entries if _LEGACY.fullmatch(entry.name) and entry.name != LOCK_NAME)
    return []


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


@contextlib.contextmanager
def creation_lock(root: str) -> Iterator[None]:
    """Hold the exclusive ``flock`` of ``slab.lock`` (retried when the file was removed meanwhile)."""
    path = os.path.join(root, LOCK_NAME)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(path)):
                    break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)


def _read_state(root: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(root, STATE_NAME), encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _write_state(root: str, state: dict[str, Any], *, durable: bool) -> None:
    path = os.path.join(root, STATE_NAME)
    temp = f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, sort_keys=True)
        handle.flush()
        if durable:
            os.fsync(handle.fileno())
    os.replace(temp, path)


def _unused(root: str) -> bool:
    """Whether no process holds the store open (no shared ``flock`` on its first data file)."""
    try:
        fd = os.open(os.path.join(root, DATA_PREFIX + "0"), os.O_RDONLY | _CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _remove_files(root: str, *, keep_lock: bool = True) -> None:
    for path in store_paths(root):
        if keep_lock and path.endswith(LOCK_NAME):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _fits(root: str, state: dict[str, Any], settings: StoreSettings | None) -> StoreGeometry | None:
    """The recorded geometry, when the store on disk is whole (and was made with ``settings``' shape,
    unless ``settings`` is ``None``)."""
    if state.get("layout") != LAYOUT or (settings is not None and state.get("shape") != settings.shape()):
        return None
    try:
        geometry = StoreGeometry.from_json(state.get("geometry") or {})
    except ValueError:
        return None
    for index in range(geometry.files):
        try:
            if os.stat(os.path.join(root, f"{DATA_PREFIX}{index}")).st_size < geometry.file_size(index):
                return None
        except FileNotFoundError:
            return None
    return geometry


def open_store(root: str, settings: StoreSettings, *, create: bool, bump: Bump) -> OpenStore | None:
    """Open the store below ``root``, creating it (or re-creating one of another shape) when ``create``.

    Without ``create`` a whole store of any shape is opened as it is (operator commands: listing,
    purging), and ``None`` returned when there is none. Raises :class:`LegacyLayoutError`,
    :class:`StoreMismatch` (another shape, in use elsewhere), or ``OSError`` when the files cannot be
    made (every file this call made is removed again).
    """
    legacy = legacy_files(root)
    if legacy:
        raise LegacyLayoutError(legacy)
    if not create and not os.path.exists(os.path.join(root, STATE_NAME)):
        return None
    with creation_lock(root):
        state = _read_state(root)
        geometry = _fits(root, state, settings if create else None) if state is not None else None
        if geometry is None:
            if state is not None and not _unused(root):
                raise StoreMismatch(_describe(state))
            if not create:
                return None
            _remove_files(root)
            geometry, state = _create(root, settings, bump)
            reset = True
        else:
            assert state is not None
            reset = state.get("boot_id") != _boot_id() and not state.get("clean") and not state.get("durable")
        files = _open_data(root, geometry)
        try:
            index = open_index(os.path.join(root, INDEX_NAME), geometry)
        except BaseException:
            for file in files:
                file.close()
            raise
        store_id = bytes.fromhex(state["store_id"])
        if reset or index.store_id() != store_id:
            index.reset(store_id)
            bump("index_resets" if not state.get("fresh") else "stores_created")
        if state.get("clean") or state.get("boot_id") != _boot_id() or state.get("fresh"):
            state = {**state, "boot_id": _boot_id(), "clean": False, "fresh": False}
            _write_state(root, state, durable=settings.durable)
        fcntl.flock(files[0].fd, fcntl.LOCK_SH)  # "in use", until the descriptor closes
    return OpenStore(root, geometry, files, index, state)


def _describe(state: dict[str, Any]) -> str:
    shape = state.get("shape") or {}
    return ", ".join(f"{name}={value}" for name, value in sorted(shape.items())) or "an unreadable state"


def _create(root: str, settings: StoreSettings, bump: Bump) -> tuple[StoreGeometry, dict[str, Any]]:
    geometry = StoreGeometry.plan(
        settings.capacity_bytes,
        region_bytes=settings.region_bytes,
        file_bytes=settings.file_bytes,
        index_bytes=settings.index_bytes,
        page_bytes=settings.page_bytes,
    )
    try:
        for index in range(geometry.files):
            path = os.path.join(root, f"{DATA_PREFIX}{index}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o600)
            try:
                _preallocate(fd, geometry.file_size(index), bump)
                if settings.zero_fill:
                    _zero_fill(fd, geometry.file_size(index))
                if settings.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
        state = {
            "layout": LAYOUT,
            "shape": settings.shape(),
            "geometry": geometry.to_json(),
            "store_id": secrets.token_hex(16),
            "durable": settings.durable,
            "boot_id": _boot_id(),
            "clean": False,
            "fresh": True,
        }
        _write_state(root, state, durable=settings.durable)
    except BaseException:
        _remove_files(root, keep_lock=False)  # nothing of the failed creation is left, the lock file included
        raise
    return geometry, state


def _open_data(root: str, geometry: StoreGeometry) -> list[DataFile]:
    files: list[DataFile] = []
    try:
        for index in range(geometry.files):
            path = os.path.join(root, f"{DATA_PREFIX}{index}")
            fd = os.open(path, os.O_RDWR | _CLOEXEC)
            files.append(DataFile(path, fd))
            no_readahead(fd)
    except BaseException:
        for file in files:
            file.close()
        raise
    return files


def close_store(store: OpenStore, *, durable: bool) -> bool:
    """Close ``store``; the last process to close it removes an empty store, or flushes a non-empty one
    and marks it clean. Returns whether the store's files were removed."""
    root = store.root
    with creation_lock(root):
        fcntl.flock(store.files[0].fd, fcntl.LOCK_UN)
        last = _unused(root)
        empty = last and store.index.page_count() == 0 and store.index.claim_count() == 0
        if last and not empty:
            for file in store.files:
                with contextlib.suppress(OSError):
                    os.fdatasync(file.fd)
            store.index.sync()
        store.index.close()
        for file in store.files:
            file.close()
        if empty:
            _remove_files(root, keep_lock=False)
            return True
        if last:
            with contextlib.suppress(OSError):
                _write_state(root, {**store.state, "clean": True}, durable=durable)
    return False


def remove_store(root: str) -> bool:
    """Remove the store below ``root`` if no process has it open; whether it was removed."""
    if not os.path.exists(os.path.join(root, LOCK_NAME)) and not store_paths(root):
        return False
    with creation_lock(root):
        if not _unused(root):
            return False
        _remove_files(root, keep_lock=False)
    return True


def _preallocate(fd: int, size: int, bump: Bump) -> None:
    """Reserve ``size`` bytes (``posix_fallocate``); a file system without it gets a sparse file."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        bump("fallocate_unsupported")
        os.ftruncate(fd, size)


def _zero_fill(fd: int, size: int) -> None:
    """Write zeros over the file (turning fallocated blocks into written ones), then drop them from the
    page cache."""
    chunk = memoryview(bytes(8 << 20))
    offset = 0
    while offset < size:
        written = os.pwrite(fd, chunk[: min(len(chunk), size - offset)], offset)
        if written <= 0:
            raise OSError(errno.EIO, "could not zero-fill the store")
        offset += written
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, size, os.POSIX_FADV_DONTNEED)


def no_readahead(fd: int) -> None:
    """Tell the kernel reads of ``fd`` are random (``POSIX_FADV_RANDOM``): a read fetches the bytes asked
    for and not the slots after them. A no-op where the platform has no ``posix_fadvise``."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        advise(fd, 0, 0, os.POSIX_FADV_RANDOM)


def attach_direct(files: list[DataFile], bump: Bump) -> bool:
    """Open an ``O_DIRECT`` descriptor next to each buffered one; ``False`` (and none) where unsupported."""
    if not _O_DIRECT:
        bump("direct_io_unsupported")
        return False
    probe = mmap.mmap(-1, BLOCK)
    try:
        for file in files:
            fd = os.open(file.path, os.O_RDWR | _O_DIRECT | _CLOEXEC)
            try:
                with memoryview(probe) as view:
                    os.preadv(fd, [view], 0)  # some file systems accept the flag, then refuse the I/O
            except OSError:
                os.close(fd)
                raise
            file.direct_fd = fd
    except OSError:
        for file in files:
            if file.direct_fd is not None:
                os.close(file.direct_fd)
                file.direct_fd = None
        bump("direct_io_unsupported")
        return False
    finally:
        probe.close()
    return True
