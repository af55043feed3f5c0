"""Pipelined SET and GET of page records straight from and into host-pool memory.

redis-py packs one value argument as one buffer, which would force a copy of every page into a
new ``bytes`` on writes, and its reply parser copies every value twice (a socket buffer, then a
new ``bytes``) on reads. Here the RESP requests are written by hand and replies are parsed by hand
over connections taken from the client's own pools:

- writes: per page, one vectored ``sendmsg`` of [RESP prefix + record header, page segments...]
  (``sendall`` per buffer on TLS sockets). Whenever the socket is full, the sender computes the
  XXH3-64 of the next pages instead of waiting; with a ``hasher`` executor, a worker thread also
  hashes ahead (xxhash releases the GIL), and a page nobody has reached yet is hashed by the
  sender just before it goes out (:class:`~hicache_storage.lookahead.Lookahead`).
  The bytes on the wire are exactly those of ``SET key value [PX ms]``: one SET per page, so a
  page is visible whole.
- reads: a bulk reply of the expected record size is received with ``recv_into`` directly into
  the page's segments (after the 24-byte header); its checksum runs on the worker thread while
  the next value arrives. Values of any other size come back as ``bytes`` (a damaged record).

With several servers (Redis Cluster), every server's requests are sent before any reply is read,
so the servers work in parallel. Connection faults raise, and every connection used by the call
is then dropped, never reused half-read. Error replies (``MOVED``, ``ASK``, ``OOM`` ...) come back
as :class:`ResponseError` values for the caller to retry through redis-py.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from hicache_storage.lookahead import Lookahead
from hicache_storage.page_format import HEADER_SIZE, checksum, encode_header
from hicache_storage.vectored_io import byte_views, sendmsg_all

__all__ = ["Filled", "GetGroup", "SetGroup", "get_pages", "set_pages"]

#: (redis key, page segments) per page, for one server (a ``redis.Redis``).
SetGroup = tuple[Any, Sequence[tuple[bytes, Sequence[memoryview]]]]
#: Same shape for reads: the segments are filled from the stored record.
GetGroup = SetGroup

_READ_CHUNK = 1 << 16
_CRLF = b"\r\n"


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
def _send(sock: Any, buffers: Sequence[Any], while_blocked: Callable[[], bool]) -> None:
    """Send every byte of ``buffers``, in order (vectored where the socket allows it); on a plain
    socket, ``while_blocked`` runs whenever the socket is full (see ``sendmsg_all``)."""
    if isinstance(sock, ssl.SSLSocket) or not hasattr(sock, "sendmsg"):
        for buffer in buffers:
            sock.sendall(buffer)
        return
    sendmsg_all(sock, buffers, while_blocked)


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


# ------------------------------------------------------------------------------------------ replies
class _Reader:
    """Buffered RESP reply reader over a socket that can hand bulk payloads to caller buffers."""

    __slots__ = ("_buf", "_end", "_sock", "_start", "_view")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
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

    def __init__(self) -> None:
        self.taken: list[tuple[Any, Any]] = []

    def take(self, node: Any) -> Any:
        pool = node.connection_pool
        connection = pool.get_connection()
        self.taken.append((pool, connection))
        if connection._sock is None:
            connection.connect()
        return connection

    def finish(self, failed: bool) -> None:
        for pool, connection in self.taken:
            if failed:
                connection.disconnect()
            pool.release(connection)


def set_pages(
    groups: Sequence[SetGroup], ttl_ms: int | None, hasher: Executor | None = None, window: int = 64
) -> list[list[Any]]:
    """Pipeline one SET per page, per group; one reply list per group.

    Pages stream without a pause: the replies of a window of ``window`` pages are read once the
    next window is sent. A reply is ``True`` when stored, ``False`` for an unexpected reply, or
    the :class:`ResponseError` the server answered.
    """
    pages = [segments for _node, requests in groups for _key, segments in requests]
    headers = Lookahead(encode_header, pages, hasher)
    suffix = _set_suffix(ttl_ms)
    connections = _Connections()
    readers: list[_Reader] = []
    replies: list[list[Any]] = []
    failed = True
    try:
        position = 0
        for node, requests in groups:
            sock = connections.take(node)._sock
            reader = _Reader(sock)
            readers.append(reader)
            out: list[Any] = []
            replies.append(out)
            tail = b""
            for sent, (key, segments) in enumerate(requests, 1):
                header = headers.get(position)
                position += 1
                payload = sum(segment.nbytes for segment in segments)
                _send(sock, [tail + _set_prefix(key, header, payload, ttl_ms), *segments], headers.advance)
                tail = suffix
                if sent % window == 0 and sent > window:  # keep at most two windows unanswered
                    out.extend(_set_reply(reader.reply()) for _ in range(window))
            if tail:
                sock.sendall(tail)
        for reader, out, (_node, requests) in zip(readers, replies, groups, strict=True):
            out.extend(_set_reply(reader.reply()) for _ in range(len(requests) - len(out)))
        failed = False
        return replies
    finally:
        headers.close()
        connections.finish(failed)


def _set_reply(reply: Any) -> bool | ResponseError:
    return reply if isinstance(reply, ResponseError) else reply is True


def _get_requests(requests: Sequence[tuple[bytes, Any]]) -> bytes:
    return b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key) for key, _ in requests)


def get_pages(groups: Sequence[GetGroup], hasher: Executor | None = None, window: int = 64) -> list[list[Any]]:
    """Pipeline one GET per page, per group; one reply list per group.

    GETs go out a window of ``window`` pages at a time; the next window is requested just before
    the last value of the current one is read, so a server holds at most about one window of
    replies and never idles between windows. A reply is ``None`` (no such key), a
    :class:`Filled` (a value of the page's record size, received into its segments), ``bytes``
    (a value of another size) or a :class:`ResponseError`.
    """
    connections = _Connections()
    digests: list[Any] = []
    failed = True
    try:
        socks = []
        for node, requests in groups:
            sock = connections.take(node)._sock
            socks.append(sock)
            sock.sendall(_get_requests(requests[:window]))
        replies = []
        for sock, (_node, requests) in zip(socks, groups, strict=True):
            reader = _Reader(sock)
            out: list[Any] = []
            for number, (_key, segments) in enumerate(requests):
                if number % window == window - 1 and number + 1 < len(requests):
                    sock.sendall(_get_requests(requests[number + 1 : number + 1 + window]))
                out.append(_get_reply(reader, segments, hasher, digests))
            replies.append(out)
        failed = False
        return replies
    finally:
        if failed:
            _wait(digests)
        connections.finish(failed)


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
