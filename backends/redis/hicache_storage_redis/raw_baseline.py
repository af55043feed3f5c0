"""The raw client ``hicache-storage bench redis`` compares the backend with: redis-py, no SDK.

The client is :func:`~hicache_storage_redis.client.build_client` of the backend's own options (same
server or cluster, credentials, TLS, timeouts and pool size). Each call is one pipeline: ``SET key
page [PX ttl]`` sent from the caller's buffer, ``GET`` copied into the buffer (a hit only when the
value has the buffer's size), ``EXISTS``. No record header, no checksum, no key space. Keys are
``<key_prefix>raw-baseline/<key>``; storage keys never contain ``/``, so they never meet the
backend's records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hicache_storage.plugin.vectored_io import flat_view

from .client import build_client
from .options import RedisOptions

__all__ = ["RAW_PREFIX", "RawRedis"]

#: Put after ``key_prefix`` in front of every key the raw client writes.
RAW_PREFIX = "raw-baseline/"
_DELETE_BATCH = 512


class RawRedis:
    """redis-py pipelines under ``<key_prefix>raw-baseline/``; a :class:`~hicache_storage.plugin.RawBaseline`.

    Not thread-safe: one call at a time. ``close()`` deletes every key this client wrote.
    """

    def __init__(self, client: Any, key_prefix: str, ttl_ms: int | None = None) -> None:
        self.client = client
        self.prefix = key_prefix + RAW_PREFIX
        self._ttl_ms = ttl_ms
        self._written: set[str] = set()

    @classmethod
    def from_options(cls, options: RedisOptions, timeout_s: float) -> RawRedis:
        """The client the backend would build (``socket_timeout_s``, else ``timeout_s``), same ``ttl_s``."""
        return cls(build_client(options, options.socket_timeout_s or timeout_s), options.key_prefix, options.ttl_ms)

    def key(self, key: str) -> str:
        """The Redis key the raw client uses for ``key``."""
        return self.prefix + key

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        names = [self.prefix + key for key in keys]
        pipe = self.client.pipeline(transaction=False)
        for name, buffer in zip(names, buffers, strict=True):
            pipe.set(name, flat_view(buffer), px=self._ttl_ms)
        replies = pipe.execute()
        self._written.update(names)
        return [reply is True for reply in replies]

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.get(self.prefix + key)
        results = []
        for value, buffer in zip(pipe.execute(), buffers, strict=True):
            view = flat_view(buffer)
            hit = value is not None and len(value) == view.nbytes
            if hit:
                view[:] = value
            results.append(hit)
        return results

    def exists(self, keys: Sequence[str]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.exists(self.prefix + key)
        return [bool(count) for count in pipe.execute()]

    def close(self) -> None:
        """Delete every key this client wrote, then close the client."""
        names = sorted(self._written)
        for begin in range(0, len(names), _DELETE_BATCH):
            pipe = self.client.pipeline(transaction=False)
            for name in names[begin : begin + _DELETE_BATCH]:
                pipe.delete(name)
            pipe.execute()
        self._written.clear()
        self.client.close()
