"""A slab's files: naming, opening, creating under an advisory lock, preallocating, ``O_DIRECT`` descriptors."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from .header_map import HeaderIO, open_headers
from .layout import (
    BLOCK,
    SUPERBLOCK_SIZE,
    Geometry,
    LegacyLayoutError,
    SuperblockError,
    decode_superblock,
    encode_superblock,
    parse_superblock,
)

__all__ = [
    "SLAB_FILE_MARK",
    "Bump",
    "SlabFile",
    "attach_direct",
    "fsync_directory",
    "no_readahead",
    "open_files",
    "remove_if_unused",
    "slab_file_name",
]

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECT = getattr(os, "O_DIRECT", 0)
#: Infix of every slab file name (``<key space prefix>slab-<index>``).
SLAB_FILE_MARK = "slab-"

Bump = Callable[[str], None]


def slab_file_name(prefix: str, index: int) -> str:
    """File name of slab file ``index`` of the key space with ``prefix``."""
    return f"{prefix}{SLAB_FILE_MARK}{index}"


@dataclass
class SlabFile:
    """One open slab file: a buffered descriptor, its header access, and an ``O_DIRECT`` descriptor
    where that works."""

    path: str
    fd: int
    headers: HeaderIO
    direct_fd: int | None = None

    def descriptors(self) -> list[int]:
        """Every descriptor this file holds open."""
        return [self.fd] if self.direct_fd is None else [self.fd, self.direct_fd]

    def close(self) -> None:
        self.headers.close()
        for fd in self.descriptors():
            with contextlib.suppress(OSError):
                os.close(fd)


def open_files(
    root: str, prefix: str, geometry: Geometry, tag: bytes, *, durable: bool, zero_fill: bool, bump: Bump
) -> list[SlabFile]:
    """Open the slab's files, creating (or re-creating) under an advisory lock those that do not fit.

    ``durable``: sync a new file and its directory entry (otherwise a crash may lose a new, empty slab,
    which is then simply created again). A file of an earlier layout raises :class:`LegacyLayoutError`
    (nothing is replaced). When a file cannot be made (``ENOSPC``, ...), the files this call created
    are removed again, and the lock file too when no slab file of ``prefix`` is left. The open slab
    holds a shared ``flock`` on its first file (see :func:`remove_if_unused`).
    """
    files: list[SlabFile] = []
    created: list[str] = []
    lock_path = os.path.join(root, f"{prefix}slab.lock")
    lock_fd = _creation_lock(lock_path)
    try:
        for index in range(geometry.files):
            path = os.path.join(root, slab_file_name(prefix, index))
            fd = _open_or_create(
                path, geometry, index, tag, durable=durable, zero_fill=zero_fill, bump=bump, created=created
            )
            no_readahead(fd)
            try:
                headers = open_headers(fd, geometry.data_offset, bump)
            except BaseException:
                os.close(fd)
                raise
            files.append(SlabFile(path, fd, headers))
        surplus = geometry.files
        while os.path.exists(os.path.join(root, slab_file_name(prefix, surplus))):
            os.unlink(os.path.join(root, slab_file_name(prefix, surplus)))  # left over from a larger slab
            surplus += 1
        fcntl.flock(files[0].fd, fcntl.LOCK_SH)  # "in use", until the descriptor closes
    except BaseException:
        for file in files:
            file.close()
        for path in created:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if not os.path.exists(os.path.join(root, slab_file_name(prefix, 0))):
            with contextlib.suppress(OSError):
                os.unlink(lock_path)
        raise
    finally:
        os.close(lock_fd)  # releases the lock
    return files


def _creation_lock(lock_path: str) -> int:
    """A descriptor of ``lock_path`` holding its exclusive ``flock`` (retried when the file was removed
    and created again while this process waited for it)."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # creation and removal only: page I/O never takes it
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(lock_path)):
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def remove_if_unused(root: str, prefix: str) -> bool:
    """Remove the slab of ``prefix`` (its files and lock file) if it holds nothing and no process has it open
    (a lock file without slab files goes too).

    "Holds nothing": every slot header is blank (a deleted, evicted-and-deleted or cleared slab).
    "Open": an open slab holds a shared ``flock`` on its first file, so the exclusive one is refused.
    Returns whether the files were removed.
    """
    lock_path = os.path.join(root, f"{prefix}slab.lock")
    if not os.path.exists(lock_path) and not os.path.exists(os.path.join(root, slab_file_name(prefix, 0))):
        return False
    lock_fd = _creation_lock(lock_path)
    try:
        paths: list[str] = []
        while os.path.exists(os.path.join(root, slab_file_name(prefix, len(paths)))):
            paths.append(os.path.join(root, slab_file_name(prefix, len(paths))))
        if paths and (not _unused(paths[0]) or not all(_blank(path) for path in paths)):
            return False
        for path in paths:
            os.unlink(path)
        os.unlink(lock_path)
        return True
    finally:
        os.close(lock_fd)


def _unused(path: str) -> bool:
    fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _blank(path: str) -> bool:
    """Whether ``path`` is a slab file of this layout whose slot headers are all blank."""
    fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        try:
            geometry, _index, _tag = parse_superblock(os.pread(fd, SUPERBLOCK_SIZE, 0))
        except SuperblockError:
            return False
        offset, end = geometry.header_offset, geometry.data_offset
        while offset < end:
            raw = os.pread(fd, min(1 << 20, end - offset), offset)
            if not raw or raw.count(0) != len(raw):
                return False
            offset += len(raw)
        return True
    finally:
        os.close(fd)


def _open_or_create(
    path: str,
    geometry: Geometry,
    index: int,
    tag: bytes,
    *,
    durable: bool,
    zero_fill: bool,
    bump: Bump,
    created: list[str],
) -> int:
    try:
        fd = os.open(path, os.O_RDWR | _CLOEXEC)
    except FileNotFoundError:
        pass
    else:
        try:
            decode_superblock(os.pread(fd, SUPERBLOCK_SIZE, 0), geometry, index, tag)
            if os.fstat(fd).st_size >= geometry.file_size:
                return fd
            bump("slabs_replaced")
        except LegacyLayoutError:
            os.close(fd)
            raise
        except SuperblockError:
            bump("slabs_replaced")
        os.close(fd)
    directory, name = os.path.split(path)
    temp = os.path.join(directory, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600)
    try:
        _preallocate(fd, geometry.file_size, bump)
        if zero_fill:
            _zero_fill(fd, SUPERBLOCK_SIZE, geometry.file_size)
        os.pwrite(fd, encode_superblock(geometry, index, tag), 0)
        if durable:
            os.fsync(fd)
        os.replace(temp, path)
        created.append(path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if durable:
        fsync_directory(directory)
    bump("slabs_created")
    return fd


def _preallocate(fd: int, size: int, bump: Bump) -> None:
    """Reserve ``size`` bytes (``posix_fallocate``); a file system without it gets a sparse file."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        bump("fallocate_unsupported")
        os.ftruncate(fd, size)


def _zero_fill(fd: int, begin: int, end: int) -> None:
    """Write zeros over ``[begin, end)`` (turning fallocated blocks into written ones), then drop them
    from the page cache."""
    chunk = memoryview(bytes(8 << 20))
    offset = begin
    while offset < end:
        written = os.pwrite(fd, chunk[: min(len(chunk), end - offset)], offset)
        if written <= 0:
            raise OSError(errno.EIO, "could not zero-fill the slab")
        offset += written
    os.fdatasync(fd)
    os.posix_fadvise(fd, begin, end - begin, os.POSIX_FADV_DONTNEED)


def no_readahead(fd: int) -> None:
    """Tell the kernel reads of ``fd`` are random (``POSIX_FADV_RANDOM``): a read fetches the bytes asked
    for and not the slots after them. A no-op where the platform has no ``posix_fadvise``."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        advise(fd, 0, 0, os.POSIX_FADV_RANDOM)


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def attach_direct(files: list[SlabFile], bump: Bump) -> bool:
    """Open an ``O_DIRECT`` descriptor next to each buffered one; ``False`` (and none) where unsupported."""
    if not _O_DIRECT:
        bump("direct_io_unsupported")
        return False
    probe = mmap.mmap(-1, BLOCK)
    try:
        for file in files:
            try:
                fd = os.open(f"/proc/self/fd/{file.fd}", os.O_RDWR | _O_DIRECT | _CLOEXEC)
            except FileNotFoundError:
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
