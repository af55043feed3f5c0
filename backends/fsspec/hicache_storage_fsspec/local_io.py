"""Local-disk fast path: vectored, atomically published page files (temp file + ``os.replace``)."""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from collections.abc import Sequence

from hicache_storage.page_format import HEADER_SIZE, PageRecordError, checksum, encode_header, parse_header
from hicache_storage.vectored_io import writev_all

__all__ = ["LocalPageFiles", "TEMP_SUFFIX"]

TEMP_SUFFIX = ".hctmp"
_IOV_MAX = 512


class LocalPageFiles:
    """Writes and reads page files on a local file system without joining page segments."""

    def __init__(self) -> None:
        self._nonce = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._counter = itertools.count()

    def write(self, path: str, page: Sequence[memoryview]) -> None:
        """Publish ``path`` atomically: write a temp file next to it, then rename it over ``path``."""
        directory, name = os.path.split(path)
        temp = os.path.join(directory, f".{name[:40]}.{self._nonce}-{next(self._counter)}{TEMP_SUFFIX}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(temp, flags, 0o600)
        except FileNotFoundError:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(temp, flags, 0o600)
        try:
            try:
                writev_all(fd, [memoryview(encode_header(page)), *page], HEADER_SIZE + sum(s.nbytes for s in page))
            finally:
                os.close(fd)
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    @staticmethod
    def read(path: str, page: Sequence[memoryview]) -> bool | None:
        """Fill ``page`` from ``path``: ``True`` ok, ``None`` missing, ``False`` a bad record."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        expected = sum(segment.nbytes for segment in page)
        header = bytearray(HEADER_SIZE)
        try:
            if os.fstat(fd).st_size != HEADER_SIZE + expected:
                return False
            count = os.readv(fd, [header, *page])
        finally:
            os.close(fd)
        if count != HEADER_SIZE + expected:
            return False
        try:
            _length, digest = parse_header(header, expected)
        except PageRecordError:
            return False
        return checksum(page) == digest
