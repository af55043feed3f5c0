"""Pipelined SET, GET and simple commands straight from and into host-pool memory, under a deadline.

redis-py packs one value argument as one buffer, which would force a copy of every page into a
new ``bytes`` on writes, and its reply parser copies every value twice (a socket buffer, then a
new ``bytes``) on reads. Here the RESP requests are written by hand and replies are parsed by hand
over connections taken from the client's own pools:

- writes: per page, one vectored ``sendmsg`` of [RESP prefix + record header, page segments...]
  (``sendall`` per buffer on TLS sockets). Whenever the socket is full, the sender computes the
  record headers of the next pages instead of waiting; with a ``hasher`` executor, a worker thread
  also hashes ahead (xxhash releases the GIL), and a page nobody has reached yet is hashed by the
  sender just before it goes out (:class:`~hicache_storage.plugin.lookahead.Lookahead`).
  The bytes on the wire are exactly those of ``SET key value [PX ms]``: one SET per page, so a
  page is visible whole.
- reads: a bulk reply of the expected record size is received with ``recv_into`` directly into
  the page's segments (after the record header); its checksum runs on the worker thread while
  the next value arrives. Values of any other size come back as ``bytes`` (a damaged record).
- ``STRLEN`` (exists) and ``DEL`` take the same connections: every page call keeps one deadline.

Every socket wait gets what is left of the call's deadline (:class:`Budget`), so a killed, hung or
slow server costs at most the deadline; past it, bytes already received are still taken.

With several servers (Redis Cluster), every server's requests are sent before any reply is read,
so the servers work in parallel, and each server's share succeeds or fails on its own: a result
list per server, or the exception that server's connection raised (its connection is then
dropped, never reused half-read). Error replies (``MOVED``, ``ASK``, ``OOM`` ...) come back as
:class:`ResponseError` values for the caller to retry through redis-py.
"""

from __future__ import annotations

import contextlib
import math
import select
import ssl
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from hicache_storage.plugin.lookahead import Lookahead
from hicache_storage.plugin.page_format import HEADER_SIZE, RecordCodec, checksum
from hicache_storage.plugin.vectored_io import byte_views, sendmsg_all

__all__ = [
    "Budget",
    "CommandGroup",
    "Filled",
    "GetGroup",
    "GroupResult",
    "SetGroup",
    "command",
    "get_pages",
    "run_commands",
    "set_pages",
]

#: (redis key, storage key, page segments) per page, for one server (a ``redis.Redis``).
SetGroup = tuple[Any, Sequence[tuple[bytes, str, Sequence[memoryview]]]]
#: (redis key, page segments) per page, for one server: the segments are filled from the stored record.
GetGroup = tuple[Any, Sequence[tuple[bytes, Sequence[memoryview]]]]
#: (redis key, request) per key, for one server: one simple command each (``STRLEN``, ``DEL``).
CommandGroup = tuple[Any, Sequence[bytes]]
#: One server's replies, or the exception its connection raised.
GroupResult = list[Any] | BaseException
_Request = TypeVar("_Request")

_READ_CHUNK = 1 << 16
_CRLF = b"\r\n"


class Budget:
    """The deadline of one call, applied to each socket operation of it.

    ``deadline`` is absolute (:func:`time.monotonic`), ``None`` for no deadline (the sockets keep
    the client's timeouts); ``cap`` bounds any one wait (the client's I/O timeout).
    """

    __slots__ = ("cap", "deadline")

    def __init__(self, deadline: float | None, cap: float) -> None:
        self.deadline = deadline
        self.cap = cap

    def left(self) -> float:
        """Seconds left (``cap`` without a deadline); zero or less once the deadline has passed."""
        if self.deadline is None:
            return self.cap
        return min(self.cap, self.deadline - time.monotonic())

    def arm(self, sock: Any) -> None:
        """Give ``sock`` what is left as its timeout (zero, i.e. no waiting, once the deadline passed)."""
        if self.deadline is not None:
            sock.settimeout(max(0.0, self.left()))


class Filled:
    """A stored record of the expected size whose payload was received into the page's segments.

    ``header`` holds the record header; :meth:`digest` the XXH3-64 of the received payload.
    """

    __slots__ = ("_digest", "header")

    def __init__(self, header: bytes, digest: Future[int] | int) -> None:
        self.header = header
        self._digest = digest

    def digest(self) -> int:
        value = self._digest
        return value.result() if isinstance(value, Future) else value


# ------------------------------------------------------------------------------------------ sending
def _poll_writable(sock: Any, seconds: float) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(max(0, math.ceil(seconds * 1000))))


def _send(sock: Any, buffers: Sequence[Any], while_blocked: Callable[[], bool], budget: Budget) -> None:
    """Send every byte of ``buffers``, in order (vectored where the socket allows it), within the budget.

    On a plain socket, ``while_blocked`` runs whenever the socket is full (see ``sendmsg_all``);
    with a deadline, the wait for room that follows is bounded by what is left of it.
    """
    if isinstance(sock, ssl.SSLSocket) or not hasattr(sock, "sendmsg") or not hasattr(select, "poll"):
        for buffer in buffers:
            budget.arm(sock)
            sock.sendall(buffer)
        return
    if budget.deadline is None:
        sendmsg_all(sock, buffers, while_blocked)
        return

    def blocked() -> bool:
        if while_blocked():
            return True
        left = budget.left()
        if left <= 0 or not _poll_writable(sock, left):
            raise TimeoutError("the server took no more bytes before the call's deadline")
        return True  # room again: sendmsg_all tries the next send at once

    sendmsg_all(sock, buffers, blocked)


def _set_prefix(key: bytes, header: bytes, payload: int, ttl_ms: int | None) -> bytes:
    count = 3 if ttl_ms is None else 5
    return b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s" % (count, len(key), key, HEADER_SIZE + payload, header)


def _set_suffix(ttl_ms: int | None) -> bytes:
    if ttl_ms is None:
        return _CRLF
    ttl = b"%d" % ttl_ms
    return b"\r\n$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl)


def _wait(futures: list[Any]) -> None:
    """Cancel or wait for futures still reading page memory (the caller may reuse it next)."""
    for future in futures:
        if isinstance(future, Future) and not future.cancel():
            with contextlib.suppress(Exception):  # only waiting; the error was raised elsewhere
                future.result()


def command(*parts: bytes) -> bytes:
    """One RESP request of ``parts`` (command name and arguments)."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


# ------------------------------------------------------------------------------------------ replies
class _Reader:
    """Buffered RESP reply reader over a socket that can hand bulk payloads to caller buffers."""

    __slots__ = ("_budget", "_buf", "_end", "_sock", "_start", "_view")

    def __init__(self, sock: Any, budget: Budget) -> None:
        self._sock = sock
        self._budget = budget
        self._buf = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0

    def _fill(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif self._end == len(self._buf):
            if self._start:
                pending = self._end - self._start
                self._buf[:pending] = self._view[self._start : self._end]
                self._start, self._end = 0, pending
            else:  # a reply line longer than the buffer
                self._view.release()
                self._buf.extend(bytes(len(self._buf)))
                self._view = memoryview(self._buf)
        self._budget.arm(self._sock)
        count = self._sock.recv_into(self._view[self._end :])
        if not count:
            raise RedisConnectionError("connection closed by the server")
        self._end += count

    def line(self) -> bytes:
        while True:
            end = self._buf.find(_CRLF, self._start, self._end)
            if end >= 0:
                line = bytes(self._view[self._start : end])
                self._start = end + 2
                return line
            self._fill()

    def read_into(self, target: memoryview) -> None:
        """Fill ``target`` exactly: buffered bytes first, then straight from the socket."""
        size = target.nbytes
        have = min(self._end - self._start, size)
        if have:
            target[:have] = self._view[self._start : self._start + have]
            self._start += have
        recv_into = self._sock.recv_into
        while have < size:
            self._budget.arm(self._sock)
            count = recv_into(target[have:])
            if not count:
                raise RedisConnectionError("connection closed by the server")
            have += count

    def read(self, size: int) -> bytes:
        out = bytearray(size)
        self.read_into(memoryview(out))
        return bytes(out)

    def skip_crlf(self) -> None:
        if self.read(2) != _CRLF:
            raise RedisConnectionError("malformed reply: bulk value not followed by CRLF")

    def reply(self) -> Any:
        """One reply: ``True`` for ``+OK``, ``None`` for a null, ``bytes``, ``int`` or a :class:`ResponseError`."""
        line = self.line()
        kind = line[:1]
        if kind == b"$":
            size = int(line[1:])
            if size < 0:
                return None
            value = self.read(size)
            self.skip_crlf()
            return value
        if kind == b"+":
            return line == b"+OK"
        if kind == b"-":
            return ResponseError(line[1:].decode("utf-8", "replace"))
        if kind == b"_":
            return None
        if kind == b":":
            return int(line[1:])
        if kind == b"!":  # RESP3 blob error
            message = self.read(int(line[1:]))
            self.skip_crlf()
            return ResponseError(message.decode("utf-8", "replace"))
        raise RedisConnectionError(f"unexpected reply type {kind!r}")


# ------------------------------------------------------------------------------------------ calls
class _Connections:
    """Connections taken from each group's pool; dropped on a fault, released at the end."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.taken: list[tuple[Any, Any]] = []
        self.failed: set[int] = set()

    def take(self, node: Any) -> Any:
        """A connected socket of ``node``'s pool (connected within the budget when it had none)."""
        pool = node.connection_pool
        connection = pool.get_connection()
        self.taken.append((pool, connection))
        if connection._sock is None:
            self._connect(connection)
        return connection._sock

    def _connect(self, connection: Any) -> None:
        if self.budget.deadline is None:
            connection.connect()
            return
        left = self.budget.left()
        if left <= 0:
            raise TimeoutError("no time left to connect before the call's deadline")
        timeouts = connection.socket_timeout, connection.socket_connect_timeout
        connection.socket_timeout = connection.socket_connect_timeout = left
        try:
            connection.connect()
        finally:
            connection.socket_timeout, connection.socket_connect_timeout = timeouts

    def fail(self, index: int) -> None:
        """Mark the connection of group ``index`` as broken (dropped at :meth:`finish`)."""
        self.failed.add(index)

    def finish(self) -> None:
        for index, (pool, connection) in enumerate(self.taken):
            if index in self.failed:
                connection.disconnect()
            elif self.budget.deadline is not None and connection._sock is not None:
                with contextlib.suppress(OSError):  # redis-py expects its own timeout on a pooled socket
                    connection._sock.settimeout(connection.socket_timeout)
            pool.release(connection)


def set_pages(
    groups: Sequence[SetGroup],
    ttl_ms: int | None,
    codec: RecordCodec,
    hasher: Executor | None = None,
    *,
    window: int = 64,
    budget: Budget | None = None,
) -> list[GroupResult]:
    """Pipeline one SET per page, per group; per group, its replies or the exception it raised.

    Pages stream without a pause: the replies of a window of ``window`` pages are read once the
    next window is sent. A reply is ``True`` when stored, ``False`` for an unexpected reply, or
    the :class:`ResponseError` the server answered. Each record is bound to its storage key.
    """
    budget = budget or Budget(None, math.inf)
    pages = [(storage_key, segments) for _node, requests in groups for _key, storage_key, segments in requests]
    headers = Lookahead(lambda page: codec.header(page[0], page[1]), pages, hasher)
    suffix = _set_suffix(ttl_ms)
    connections = _Connections(budget)
    readers: list[_Reader | None] = [None] * len(groups)
    results: list[GroupResult] = [[] for _ in groups]
    firsts = [0]
    for _node, requests in groups:
        firsts.append(firsts[-1] + len(requests))

    def send(number: int) -> None:
        node, requests = groups[number]
        out = results[number]
        assert isinstance(out, list)
        sock = connections.take(node)
        reader = readers[number] = _Reader(sock, budget)
        tail = b""
        for sent, (key, _storage_key, segments) in enumerate(requests, 1):
            header = headers.get(firsts[number] + sent - 1)
            payload = sum(segment.nbytes for segment in segments)
            _send(sock, [tail + _set_prefix(key, header, payload, ttl_ms), *segments], headers.advance, budget)
            tail = suffix
            if sent % window == 0 and sent > window:  # keep at most two windows unanswered
                out.extend(_set_reply(reader.reply()) for _ in range(window))
        if tail:
            budget.arm(sock)
            sock.sendall(tail)

    def collect(number: int) -> None:
        pending, done = readers[number], results[number]
        if pending is None or not isinstance(done, list):
            return
        done.extend(_set_reply(pending.reply()) for _ in range(len(groups[number][1]) - len(done)))

    try:
        _each_live_group(results, connections, send)  # a server that fails is dropped; the others go on
        _each_live_group(results, connections, collect)
        return results
    finally:
        headers.close()
        connections.finish()


def _set_reply(reply: Any) -> bool | ResponseError:
    return reply if isinstance(reply, ResponseError) else reply is True


def _get_requests(requests: Sequence[tuple[bytes, Any]]) -> bytes:
    return b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key) for key, _ in requests)


def get_pages(
    groups: Sequence[GetGroup], hasher: Executor | None = None, window: int = 64, budget: Budget | None = None
) -> list[GroupResult]:
    """Pipeline one GET per page, per group; per group, its replies or the exception it raised.

    GETs go out a window of ``window`` pages at a time; the next window is requested just before
    the last value of the current one is read, so a server holds at most about one window of
    replies and never idles between windows. A reply is ``None`` (no such key), a
    :class:`Filled` (a value of the page's record size, received into its segments), ``bytes``
    (a value of another size) or a :class:`ResponseError`. A group that fails may have written
    part of its pages' segments; the caller treats all of them as misses.
    """
    budget = budget or Budget(None, math.inf)
    connections = _Connections(budget)
    digests: list[list[Any]] = [[] for _ in groups]
    results: list[GroupResult] = [[] for _ in groups]
    try:
        _windowed(
            groups,
            results,
            connections,
            window,
            encode=_get_requests,
            read=lambda number, reader, request: _get_reply(reader, request[1], hasher, digests[number]),
        )
        return results
    finally:
        for number, result in enumerate(results):
            if not isinstance(result, list):
                _wait(digests[number])  # a failed group's checksums may still be reading its pages
        connections.finish()


def _get_reply(reader: _Reader, segments: Sequence[memoryview], hasher: Executor | None, digests: list[Any]) -> Any:
    line = reader.line()
    if line[:1] != b"$":
        if line[:1] == b"_":
            return None
        if line[:1] == b"-":
            return ResponseError(line[1:].decode("utf-8", "replace"))
        raise RedisConnectionError(f"unexpected reply to GET: {line[:32]!r}")
    size = int(line[1:])
    if size < 0:
        return None
    payload = sum(segment.nbytes for segment in segments)
    if size != HEADER_SIZE + payload:
        value = reader.read(size)
        reader.skip_crlf()
        return value
    header = reader.read(HEADER_SIZE)
    views = byte_views(segments)
    for view in views:
        reader.read_into(view)
    reader.skip_crlf()
    digest: Future[int] | int = hasher.submit(checksum, views) if hasher is not None else checksum(views)
    digests.append(digest)
    return Filled(header, digest)


def run_commands(groups: Sequence[CommandGroup], window: int = 64, budget: Budget | None = None) -> list[GroupResult]:
    """Pipeline simple commands (``STRLEN``, ``DEL`` ...), per group; per group, its replies or its exception.

    Replies are parsed as :meth:`_Reader.reply` does: ``int``, ``bytes``, ``True``, ``None`` or a
    :class:`ResponseError`.
    """
    budget = budget or Budget(None, math.inf)
    connections = _Connections(budget)
    results: list[GroupResult] = [[] for _ in groups]
    try:
        _windowed(
            groups, results, connections, window, encode=b"".join, read=lambda _number, reader, _request: reader.reply()
        )
        return results
    finally:
        connections.finish()


def _each_live_group(results: list[GroupResult], connections: _Connections, step: Callable[[int], None]) -> None:
    """``step(number)`` for each group not failed yet; an exception fails that group only (its result)."""
    for number, result in enumerate(results):
        if not isinstance(result, list):
            continue
        try:
            step(number)
        except Exception as error:  # this server fails; the others go on
            connections.fail(number)
            results[number] = error


def _windowed(
    groups: Sequence[tuple[Any, Sequence[_Request]]],
    results: list[GroupResult],
    connections: _Connections,
    window: int,
    *,
    encode: Callable[[Sequence[_Request]], bytes],
    read: Callable[[int, _Reader, _Request], Any],
) -> None:
    """Pipeline each group's requests a window at a time, appending ``read(number, reader, request)``
    to its result; the next window is sent just before the last reply of the current one is read."""
    budget = connections.budget
    socks: list[Any] = [None] * len(groups)

    def open_and_send(number: int) -> None:
        node, requests = groups[number]
        sock = socks[number] = connections.take(node)
        budget.arm(sock)
        sock.sendall(encode(requests[:window]))

    def receive(number: int) -> None:
        sock, out, requests = socks[number], results[number], groups[number][1]
        if sock is None or not isinstance(out, list):
            return
        reader = _Reader(sock, budget)
        for index, request in enumerate(requests):
            if index % window == window - 1 and index + 1 < len(requests):
                budget.arm(sock)
                sock.sendall(encode(requests[index + 1 : index + 1 + window]))
            out.append(read(number, reader, request))

    _each_live_group(results, connections, open_and_send)
    _each_live_group(results, connections, receive)
