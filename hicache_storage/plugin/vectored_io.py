"""Vectored whole-buffer I/O for backends: ``os.writev`` / ``os.preadv`` / ``socket.sendmsg`` looped over
short transfers, no copies.

The common case (a few segments, a regular file) is one system call; the loop only runs for more
than ``IOV_MAX`` buffers or a short write.
"""

from __future__ import annotations

import errno
import math
import os
import select
import socket
import threading
from collections.abc import Callable, Sequence

__all__ = [
    "IOV_MAX",
    "LeftoverTemps",
    "byte_views",
    "flat_view",
    "preadv_all",
    "publish_file",
    "pwritev_all",
    "sendmsg_all",
    "writev_all",
]

Buffer = bytes | bytearray | memoryview

try:
    IOV_MAX = max(16, int(os.sysconf("SC_IOV_MAX")))
except (AttributeError, ValueError, OSError):  # pragma: no cover - platform without sysconf
    IOV_MAX = 1024


def flat_view(buffer: memoryview) -> memoryview:
    """``buffer`` as a one-dimensional view of unsigned bytes (itself when it already is one; no copy)."""
    return buffer if buffer.format == "B" and buffer.ndim == 1 else buffer.cast("B")


def byte_views(buffers: Sequence[Buffer]) -> list[memoryview]:
    """Non-empty flat byte views of ``buffers`` (no copy)."""
    views = []
    for buffer in buffers:
        view = memoryview(buffer)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if view.nbytes:
            views.append(view)
    return views


def _advance(pending: list[memoryview], count: int) -> None:
    """Drop ``count`` transferred bytes from the front of ``pending``."""
    while count and pending:
        first = pending[0]
        if count >= first.nbytes:
            count -= first.nbytes
            pending.pop(0)
        else:
            pending[0] = first[count:]
            count = 0


def writev_all(fd: int, buffers: Sequence[Buffer], total: int) -> None:
    """Write all ``total`` bytes of ``buffers`` in order to ``fd`` (at its current offset)."""
    done = os.writev(fd, buffers) if len(buffers) <= IOV_MAX else 0
    if done == total:
        return
    pending = byte_views(buffers)
    _advance(pending, done)
    while pending:
        written = os.writev(fd, pending[:IOV_MAX])
        if written <= 0:
            raise OSError(f"writev wrote {written} bytes with {sum(v.nbytes for v in pending)} pending")
        _advance(pending, written)


def pwritev_all(fd: int, buffers: Sequence[Buffer], offset: int, total: int) -> None:
    """Write all ``total`` bytes of ``buffers`` in order to ``fd`` at ``offset`` (the file offset is unchanged)."""
    done = os.pwritev(fd, buffers, offset) if len(buffers) <= IOV_MAX else 0
    if done == total:
        return
    pending = byte_views(buffers)
    _advance(pending, done)
    while pending:
        written = os.pwritev(fd, pending[:IOV_MAX], offset + done)
        if written <= 0:
            raise OSError(errno.EIO, f"pwritev wrote {written} bytes with {total - done} pending")
        done += written
        _advance(pending, written)


def sendmsg_all(
    sock: socket.socket, buffers: Sequence[Buffer], while_blocked: Callable[[], bool] | None = None
) -> None:
    """Send every byte of ``buffers`` in order on a stream socket (``sendmsg``, looped over partial sends).

    With ``while_blocked``, the socket is driven without blocking for the call: whenever it cannot
    take more bytes, ``while_blocked()`` runs on the calling thread (other work, such as the next
    page's checksum) and says whether it did anything; once it has nothing left to do, the call
    waits for the socket as a blocking send would, bounded by the socket's timeout
    (``TimeoutError`` when it passes). The socket's blocking mode and timeout are restored.
    """
    pending = byte_views(buffers)
    if while_blocked is None:
        while pending:
            _advance(pending, sock.sendmsg(pending[:IOV_MAX]))
        return
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        _send_working(sock, pending, while_blocked, timeout)
    finally:
        sock.settimeout(timeout)


def _send_working(
    sock: socket.socket, pending: list[memoryview], while_blocked: Callable[[], bool], timeout: float | None
) -> None:
    has_work = True
    while pending:
        try:
            _advance(pending, sock.sendmsg(pending[:IOV_MAX]))
            continue
        except BlockingIOError:
            pass
        if has_work:
            has_work = while_blocked()
            if has_work:
                continue
        if not _wait_writable(sock, timeout):
            raise TimeoutError(f"socket not writable within {timeout} s")


def _wait_writable(sock: socket.socket, timeout: float | None) -> bool:
    """Whether ``sock`` became writable within ``timeout`` seconds (``None``: no limit)."""
    if not hasattr(select, "poll"):  # pragma: no cover - platform without poll()
        return bool(select.select([], [sock], [], timeout)[1])
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(None if timeout is None else max(0, math.ceil(timeout * 1000))))


def preadv_all(fd: int, buffers: Sequence[memoryview | bytearray], offset: int = 0) -> int:
    """Fill ``buffers`` in order from ``fd`` at ``offset`` until they are full or the file ends.

    Returns the number of bytes read; fewer than the buffers hold means the file was shorter (a short
    read of a regular file is taken as its end).
    """
    if len(buffers) <= IOV_MAX:
        return os.preadv(fd, buffers, offset)
    pending = byte_views(buffers)
    total = 0
    while pending:
        batch = pending[:IOV_MAX]
        count = os.preadv(fd, batch, offset + total)
        if count <= 0:
            break
        total += count
        if count < sum(view.nbytes for view in batch):
            break
        _advance(pending, count)
    return total


#: Flags of a new file that must not exist yet (and stays closed across exec).
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


class LeftoverTemps:
    """Temp files a failed publish could not remove (the file system turned read-only under it, say):
    :meth:`sweep` removes them once it can. Thread-safe."""

    def __init__(self) -> None:
        self._paths: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._paths)

    def add(self, path: str) -> None:
        with self._lock:
            self._paths.add(path)

    def sweep(self) -> int:
        """Try to remove every leftover temp file again; how many are still there."""
        if not self._paths:
            return 0
        with self._lock:
            paths, self._paths = self._paths, set()
        kept = set()
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                kept.add(path)
        with self._lock:
            self._paths |= kept
            return len(self._paths)


def publish_file(
    temp: str,
    final: str,
    buffers: Sequence[Buffer],
    total: int,
    *,
    fsync: bool = False,
    make_directory: Callable[[], None] | None = None,
    leftovers: LeftoverTemps | None = None,
) -> None:
    """Write ``buffers`` (``total`` bytes) to the new file ``temp`` (mode 0600), then rename it over ``final``.

    Readers of ``final`` see the old file or the whole new one, never a part. When ``temp``'s
    directory is missing, ``make_directory()`` creates it (again, up to twice, for a directory that
    another process removes as it empties). On any error ``temp`` is removed and the error raised;
    a ``temp`` that cannot be removed then goes to ``leftovers``, which the next call sweeps first.
    """
    if leftovers:
        leftovers.sweep()
    for attempt in range(3):
        try:
            fd = os.open(temp, _NEW_FILE_FLAGS, 0o600)
            break
        except FileNotFoundError:
            if make_directory is None or attempt == 2:
                raise
            make_directory()
    try:
        try:
            writev_all(fd, buffers, total)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, final)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        except OSError:
            if leftovers is not None:
                leftovers.add(temp)
        raise
