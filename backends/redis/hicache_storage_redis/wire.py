"""Vectored SET: send a page record to Redis straight from its segments, without joining them.

redis-py packs one value argument as one buffer, which would force a copy of every page into a
new ``bytes``. Here the RESP request is written by hand as a list of buffers (the record header,
then each page segment as a zero-copy memoryview) and sent over a connection from the client's
own pool, followed by reading the replies; the bytes on the wire are exactly those of
``SET key value [PX ms]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ResponseError

from hicache_storage.page_format import encode_header

__all__ = ["SetRequest", "pack_set", "send_sets"]

#: (redis key, page segments): one SET of header + segments.
SetRequest = tuple[bytes, Sequence[memoryview]]


def pack_set(key: bytes, segments: Sequence[memoryview], ttl_ms: int | None, out: list[Any]) -> None:
    """Append the RESP buffers of ``SET key <header + segments> [PX ttl_ms]`` to ``out``."""
    header = encode_header(segments)
    length = len(header) + sum(segment.nbytes for segment in segments)
    count = 3 if ttl_ms is None else 5
    out.append(b"*%d\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s" % (count, len(key), key, length, header))
    out.extend(segments)
    if ttl_ms is None:
        out.append(b"\r\n")
    else:
        ttl = b"%d" % ttl_ms
        out.append(b"\r\n$2\r\nPX\r\n$%d\r\n%s\r\n" % (len(ttl), ttl))


def send_sets(node: Any, requests: Sequence[SetRequest], ttl_ms: int | None) -> list[bool | ResponseError]:
    """Pipeline ``requests`` as SETs over one connection of ``node`` (a ``redis.Redis``).

    One entry per request: ``True`` when stored, ``False`` for an unexpected reply, or the
    :class:`ResponseError` the server answered (``MOVED`` in a cluster that is resharding, ``OOM``
    ...). Connection faults raise; the connection is then dropped, never reused half-read.
    """
    buffers: list[Any] = []
    for key, segments in requests:
        pack_set(key, segments, ttl_ms, buffers)
    pool = node.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command(buffers, check_health=False)
        replies: list[bool | ResponseError] = []
        for _ in requests:
            try:
                reply = connection.read_response()
            except ResponseError as error:
                replies.append(error)
            else:
                replies.append(reply in (b"OK", "OK", True))
        return replies
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
