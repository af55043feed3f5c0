"""The redis backend: one string value per page (record header + payload), written with one SET.

A single ``SET`` makes a page visible whole or not at all. Batches travel as pipelines of at most
``pipeline_pages`` commands; in cluster mode redis-py's cluster pipeline routes each command to the
node owning its slot. Reads verify the record (length, magic, XXH3-64); a bad record is a miss
counted as ``integrity_failures``. Keys evicted by ``maxmemory`` or expired by ``ttl_s`` are misses.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from redis.exceptions import ResponseError

from hicache_storage import Capabilities, HiCacheStorage, HiCacheStorageConfig
from hicache_storage.batch_context import BatchContext
from hicache_storage.page_format import HEADER_SIZE, PageRecordError, decode_into, encode_record, parse_header

from .client import build_client
from .options import RedisOptions, check_secret_types
from .raw_baseline import RawRedis
from .raw_store import RedisRawStore, glob_escape
from .wire import Filled, get_pages, set_pages

__all__ = ["DEFAULT_TIMEOUT_S", "RedisBackend"]

#: I/O timeout when neither ``socket_timeout_s`` nor a resilience deadline is configured.
DEFAULT_TIMEOUT_S = HiCacheStorage.DEFAULT_IO_TIMEOUT_S
_CLEAR_BATCH = 512
#: Error replies that mean "ask another node" (cluster resharding or failover): retried through redis-py.
_REDIRECT_CODES = frozenset({"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"})


class RedisBackend(HiCacheStorage):
    """Pages as Redis strings under ``key_prefix`` (see :class:`RedisOptions`).

    Construction never contacts the server, so an engine can start while Redis is down; the client
    is built on first use and faults become misses / ``False``. ``raw_store()`` is a mapping over the
    stored records (storage key → bytes) for tools and tests.
    """

    Options: ClassVar[type[Any]] = RedisOptions
    capabilities = Capabilities(
        persistent=True,
        shared=True,
        may_evict=True,
        supports_delete=True,
        supports_clear=True,
        verifies_integrity=True,
    )

    @staticmethod
    def raw_baseline(config: HiCacheStorageConfig) -> RawRedis:
        """redis-py pipelines under ``<key_prefix>raw-baseline/`` for ``hicache-storage bench`` to compare with."""
        return RawRedis.from_config(config)

    def __init__(self, config: HiCacheStorageConfig) -> None:
        check_secret_types(dict(getattr(config, "extra_config", None) or {}))
        super().__init__(config)
        options: RedisOptions = self.options
        self.timeout_s = options.socket_timeout_s or self.io_timeout_s
        self.key_prefix = options.key_prefix
        self._ttl_ms = None if options.ttl_s is None else max(1, round(options.ttl_s * 1000))
        self._chunk = options.pipeline_pages
        self._hash_ahead = options.hashes_ahead
        self._client: Any = None
        self._hash_pool: ThreadPoolExecutor | None = None
        self._client_lock = threading.Lock()

    # ------------------------------------------------------------ helpers
    def client(self) -> Any:
        """The redis-py client, built on first use."""
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = build_client(self.options, self.timeout_s)
                client = self._client
        return client

    def redis_key(self, storage_key: str) -> str:
        """The Redis key holding the page of ``storage_key``."""
        return self.key_prefix + storage_key

    def raw_store(self) -> RedisRawStore:
        """Mapping storage key → stored record bytes, behind the backend's back."""
        return RedisRawStore(self.client(), self.key_prefix)

    def _chunks(self, count: int) -> Iterator[range]:
        for begin in range(0, count, self._chunk):
            yield range(begin, min(begin + self._chunk, count))

    def _run(self, build: Any, count: int) -> list[Any]:
        """Execute ``build(pipe, index)`` for every index, one pipeline per chunk; all replies."""
        client = self.client()
        replies: list[Any] = []
        for span in self._chunks(count):
            pipe = client.pipeline(transaction=False)
            for index in span:
                build(pipe, index)
            replies.extend(pipe.execute())
        return replies

    def _hasher(self) -> ThreadPoolExecutor:
        """The worker thread verifying read pages (and hashing pages ahead of writes with
        ``hash_ahead``) while other pages are on the wire (built on first use)."""
        hasher = self._hash_pool
        if hasher is None:
            with self._client_lock:
                if self._hash_pool is None:
                    self._hash_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hicache-redis-xxh3")
                hasher = self._hash_pool
        return hasher

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        client = self.client()
        rkeys = [self.key_prefix + key for key in keys]
        bkeys = [rkey.encode() for rkey in rkeys]
        results = [False] * len(keys)
        redirected: list[int] = []
        groups = self._by_node(client, rkeys, range(len(keys)))
        requests = [(node, [(bkeys[i], pages[i]) for i in indices]) for node, indices in groups]
        ahead = self._hasher() if self._hash_ahead else None
        for (_node, indices), replies in zip(
            groups, set_pages(requests, self._ttl_ms, ahead, self._chunk), strict=True
        ):
            for index, reply in zip(indices, replies, strict=True):
                if isinstance(reply, ResponseError):
                    if self._is_redirect(reply):
                        redirected.append(index)
                else:
                    results[index] = reply
        if redirected:  # MOVED/ASK/TRYAGAIN (cluster resharding): the client's pipeline follows redirects
            self.stats.bump("redirected_writes", len(redirected))
            pipe = client.pipeline(transaction=False)
            for index in redirected:
                pipe.set(rkeys[index], encode_record(pages[index]), px=self._ttl_ms)
            for index, reply in zip(redirected, pipe.execute(raise_on_error=False), strict=True):
                results[index] = reply is True
        return results

    def _is_redirect(self, reply: ResponseError) -> bool:
        """Whether an error reply asks to retry elsewhere; any other (``OOM``, ``NOPERM`` ...) is counted.

        Other error replies leave the page unwritten / unread and count as ``redis_error_<code>``.
        """
        code = str(reply).split(" ", 1)[0]
        if code in _REDIRECT_CODES:
            return True
        self.stats.bump(f"redis_error_{code.lower() if code.isalpha() else 'other'}")
        return False

    def _by_node(self, client: Any, rkeys: list[str], span: range) -> list[tuple[Any, list[int]]]:
        """Indices of ``span`` grouped by the server holding their keys (one group when standalone)."""
        if not self.options.cluster:
            return [(client, list(span))]
        groups: dict[str, tuple[Any, list[int]]] = {}
        for index in span:
            node = client.get_node_from_key(rkeys[index])
            group = groups.get(node.name)
            if group is None:
                group = groups[node.name] = (client.get_redis_connection(node), [])
            group[1].append(index)
        return list(groups.values())

    def read_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        client = self.client()
        hasher = self._hasher()
        rkeys = [self.key_prefix + key for key in keys]
        results = [False] * len(keys)
        redirected: list[int] = []
        groups = self._by_node(client, rkeys, range(len(keys)))
        requests = [(node, [(rkeys[i].encode(), pages[i]) for i in indices]) for node, indices in groups]
        for (_node, indices), replies in zip(groups, get_pages(requests, hasher, self._chunk), strict=True):
            for index, reply in zip(indices, replies, strict=True):
                if isinstance(reply, ResponseError):
                    if self._is_redirect(reply):
                        redirected.append(index)
                else:
                    results[index] = self._check(reply, pages[index], want)
        if redirected:  # MOVED/ASK: read these through the client's pipeline, which follows redirects
            self.stats.bump("redirected_reads", len(redirected))
            pipe = client.pipeline(transaction=False)
            for index in redirected:
                pipe.get(rkeys[index])
            for index, value in zip(redirected, pipe.execute(raise_on_error=False), strict=True):
                if not isinstance(value, Exception):
                    results[index] = self._decode(value, pages[index], want)
        return results

    def _check(self, reply: Filled | bytes | None, page: list[memoryview], want: int) -> bool:
        """Whether a GET reply delivered a valid record into ``page`` (bad records are counted)."""
        if not isinstance(reply, Filled):
            return self._decode(reply, page, want)
        try:
            _length, digest = parse_header(reply.header, want - HEADER_SIZE)
        except PageRecordError:
            self.stats.bump("integrity_failures")
            return False
        if reply.digest() != digest:
            self.stats.bump("integrity_failures")
            return False
        return True

    def _decode(self, value: bytes | None, page: list[memoryview], want: int) -> bool:
        if value is None:
            return False
        if len(value) != want or not decode_into(value, page):
            self.stats.bump("integrity_failures")
            return False
        return True

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        replies = self._run(lambda pipe, i: pipe.strlen(self.key_prefix + keys[i]), len(keys))
        return [reply == want for reply in replies]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self._run(lambda pipe, i: pipe.delete(self.key_prefix + keys[i]), len(keys))
        return [True] * len(keys)

    def clear_pages(self) -> None:
        """Delete every key under ``key_prefix`` (SCAN on every primary in cluster mode)."""
        client = self.client()
        pattern = glob_escape(self.key_prefix) + "*"
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= _CLEAR_BATCH:
                self._delete_raw(batch)
                batch = []
        if batch:
            self._delete_raw(batch)

    def _delete_raw(self, keys: list[bytes]) -> None:
        pipe = self.client().pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        pipe.execute()

    def release(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
            hasher, self._hash_pool = self._hash_pool, None
        if hasher is not None:
            hasher.shutdown(wait=True)
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"<RedisBackend {self.options!r} closed={self.closed}>"
