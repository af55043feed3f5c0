"""Local-disk fast path: vectored, atomically published page files (temp file + ``os.replace``).

Reads open only regular files: never following a symbolic link, never blocking on a FIFO.
"""

from __future__ import annotations

import errno
import itertools
import os
import secrets
import stat
from collections.abc import Sequence

from hicache_storage.plugin.page_format import HEADER_SIZE, PageRecordError, RecordCodec
from hicache_storage.plugin.vectored_io import LeftoverTemps, publish_file

__all__ = ["LocalPageFiles", "TEMP_SUFFIX"]

TEMP_SUFFIX = ".hctmp"
_IOV_MAX = 512
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)


class LocalPageFiles:
    """Writes and reads page files on a local file system without joining page segments."""

    def __init__(self, codec: RecordCodec | None = None) -> None:
        self._codec = codec or RecordCodec()
        self._nonce = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._counter = itertools.count()
        #: Temp files of failed writes not removed yet (swept by the next write and at close).
        self.leftovers = LeftoverTemps()

    def write(self, path: str, key: str, page: Sequence[memoryview]) -> None:
        """Publish the record of ``page`` under storage key ``key`` at ``path`` atomically: write a temp
        file next to it, then rename it over ``path``."""
        directory, name = os.path.split(path)
        temp = os.path.join(directory, f".{name[:40]}.{self._nonce}-{next(self._counter)}{TEMP_SUFFIX}")
        header = memoryview(self._codec.header(key, page))
        publish_file(
            temp,
            path,
            [header, *page],
            HEADER_SIZE + sum(s.nbytes for s in page),
            make_directory=lambda: os.makedirs(directory, mode=0o700, exist_ok=True),
            leftovers=self.leftovers,
        )

    @staticmethod
    def exists(path: str, size: int) -> bool:
        """Whether ``path`` is a regular file (not a link to one) of ``size`` bytes."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == size

    def read(self, path: str, key: str, page: Sequence[memoryview]) -> bool | None:
        """Fill ``page`` from ``path`` (the record of ``key``): ``True`` ok, ``None`` missing, ``False`` a
        bad record or something other than a regular file."""
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in _NOT_A_PAGE:  # a symbolic link, a socket: not a page
                return False
            raise
        expected = sum(segment.nbytes for segment in page)
        header = bytearray(HEADER_SIZE)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != HEADER_SIZE + expected:
                return False
            count = os.readv(fd, [header, *page])
        finally:
            os.close(fd)
        if count != HEADER_SIZE + expected:
            return False
        try:
            parsed = self._codec.check_header(header, key, expected)
        except PageRecordError:
            return False
        return self._codec.verify(parsed, key, page)


_NOT_A_PAGE = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO})
