"""The redis backend: one string value per page (record header + payload), written with one SET.

A single ``SET`` makes a page visible whole or not at all. Batches travel as pipelines of at most
``pipeline_pages`` commands, sent straight over the client's pooled connections
(:mod:`.wire`); in cluster mode each node gets the commands of the slots it owns, and each node's
share succeeds or fails on its own. Reads verify the record (length, magic, the digest of the
storage key it was written under, XXH3-64, and with a secret its tag); a bad record is a miss
counted as ``integrity_failures``. Keys evicted by ``maxmemory`` or expired by ``ttl_s`` are misses.

Every socket wait of a page call gets what is left of the call's resilience deadline, so a killed,
hung or slow server never keeps a call past it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from redis.exceptions import ResponseError

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendSetup,
    BatchContext,
    Capabilities,
    PageBuffers,
    StoredPage,
    current_deadline,
    time_left,
)
from hicache_storage.plugin.page_format import HEADER_SIZE, PageRecordError, record_codec

from .client import build_client
from .options import RedisOptions
from .raw_baseline import RawRedis
from .raw_store import glob_escape
from .wire import Budget, Filled, GroupResult, command, get_pages, run_commands, set_pages

__all__ = ["RedisBackend"]

_CLEAR_BATCH = 512
#: Error replies that mean "ask another node" (cluster resharding or failover): retried through redis-py.
_REDIRECT_CODES = frozenset({"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"})


#: A storage key (what follows ``key_prefix`` for a page or manifest record).
_PAGE_KEY = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.[A-Za-z0-9_][A-Za-z0-9._-]*")


class RedisBackend(Backend[RedisOptions]):
    """Pages as Redis strings under ``key_prefix`` (see :class:`RedisOptions`).

    Construction never contacts the server, so an engine can start while Redis is down; the client
    is built on first use and faults become misses / ``False``. ``options`` are the parsed options,
    ``client()`` the redis-py client and ``key_prefix`` what every Redis key starts with (tools reach
    the stored records through them: :class:`~hicache_storage_redis.raw_store.RedisRawStore`).
    """

    Options = RedisOptions
    #: redis-py pipelines under ``<key_prefix>raw-baseline/`` for ``hicache-storage bench`` to compare with.
    raw_baseline_class = RawRedis
    capabilities = SHARED_STORE.with_overrides({"may_evict": True})

    @classmethod
    def capabilities_for(cls, options: RedisOptions) -> Capabilities:
        """With ``ttl_s`` every written page expires on its own (Redis ``PX``)."""
        return replace(cls.capabilities, ttl=True) if options.ttl_s is not None else cls.capabilities

    def __init__(self, setup: BackendSetup[RedisOptions]) -> None:
        options = setup.options
        #: The parsed options (endpoint, credentials, TLS, key prefix ...).
        self.options = options
        self.counters = setup.counters
        #: Each socket wait's limit: ``socket_timeout_s``, else the I/O timeout of the setup.
        self.timeout_s = options.socket_timeout_s or setup.io_timeout_s
        self.key_prefix = options.key_prefix
        self._ttl_ms = options.ttl_ms
        self._chunk = options.pipeline_pages
        self._hash_ahead = options.hashes_ahead
        self._codec = record_codec(options)
        self._client: Any = None
        self._building: Future[Any] | None = None
        self._hash_pool: ThreadPoolExecutor | None = None
        self._client_lock = threading.Lock()

    # ------------------------------------------------------------ helpers
    def client(self) -> Any:
        """The redis-py client, built on first use.

        A cluster client asks a node for the slot map while it is built; that runs on a helper
        thread and a call waits for it at most what is left of its deadline (a later call picks
        up the same build), so a hung node cannot hold a call past its deadline.
        """
        client = self._client
        if client is not None:
            return client
        if not self.options.cluster:
            with self._client_lock:
                if self._client is None:
                    self._client = build_client(self.options, self.timeout_s)
                return self._client
        helper = self._hasher()
        with self._client_lock:
            if self._client is not None:
                return self._client
            building = self._building
            if building is None or (building.done() and building.exception() is not None):
                building = self._building = helper.submit(build_client, self.options, self.timeout_s)
        try:
            built = building.result(timeout=max(0.0, time_left(self.timeout_s)))
        except FutureTimeout:
            raise TimeoutError("the Redis Cluster client was not ready within the call's deadline") from None
        with self._client_lock:
            if self._client is None:
                self._client = built
            return self._client

    def _budget(self) -> Budget:
        """The socket budget of a page call: its deadline, each wait at most the client's timeout."""
        return Budget(current_deadline(), self.timeout_s)

    def redis_key(self, storage_key: str) -> str:
        """The Redis key holding the page of ``storage_key``."""
        return self.key_prefix + storage_key

    def _hasher(self) -> ThreadPoolExecutor:
        """The worker thread verifying read pages (and hashing pages ahead of writes with
        ``hash_ahead``) while other pages are on the wire, and building a cluster client (built on
        first use)."""
        hasher = self._hash_pool
        if hasher is None:
            with self._client_lock:
                if self._hash_pool is None:
                    self._hash_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hicache-redis-xxh3")
                hasher = self._hash_pool
        return hasher

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        client = self.client()
        rkeys = [self.key_prefix + key for key in keys]
        bkeys = [rkey.encode() for rkey in rkeys]
        results = [False] * len(keys)
        redirected: list[int] = []
        groups = self._by_node(client, rkeys, range(len(keys)))
        requests = [(node, [(bkeys[i], keys[i], pages[i]) for i in indices]) for node, indices in groups]
        ahead = self._hasher() if self._hash_ahead else None
        outcomes = set_pages(requests, self._ttl_ms, self._codec, ahead, window=self._chunk, budget=self._budget())
        for index, reply in self._answers(groups, outcomes, redirected):
            results[index] = reply
        if redirected and time_left(self.timeout_s) > 0:  # MOVED/ASK (resharding): redis-py follows redirects
            self.counters.bump("redirected_writes", len(redirected))
            pipe = client.pipeline(transaction=False)
            for index in redirected:
                pipe.set(rkeys[index], self._codec.record(keys[index], pages[index]), px=self._ttl_ms)
            for index, reply in zip(redirected, pipe.execute(raise_on_error=False), strict=True):
                results[index] = reply is True
        return results

    def _settle(
        self, groups: list[tuple[Any, list[int]]], outcomes: list[GroupResult]
    ) -> Iterator[tuple[tuple[Any, list[int]], list[Any]]]:
        """(group, replies) of every server that answered; a server that failed leaves its keys
        ``False``. When every server failed, the first fault is raised (an outage, for the policy)."""
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed and len(failed) == len(outcomes):
            raise failed[0]
        if failed:
            self.counters.bump("node_faults", len(failed))
            self.counters.note(f"node: {type(failed[0]).__name__}: {failed[0]}"[:500])
        for group, outcome in zip(groups, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                yield group, outcome

    def _answers(
        self, groups: list[tuple[Any, list[int]]], outcomes: list[GroupResult], redirected: list[int]
    ) -> Iterator[tuple[int, Any]]:
        """(index, reply) of every key its server answered; keys the server redirected elsewhere are
        appended to ``redirected``, other error replies are counted and leave their key ``False``."""
        for (_node, indices), replies in self._settle(groups, outcomes):
            for index, reply in zip(indices, replies, strict=True):
                if not isinstance(reply, ResponseError):
                    yield index, reply
                elif self._is_redirect(reply):
                    redirected.append(index)

    def _is_redirect(self, reply: ResponseError) -> bool:
        """Whether an error reply asks to retry elsewhere; any other (``OOM``, ``NOPERM`` ...) is counted.

        Other error replies leave the page unwritten / unread and count as ``redis_error_<code>``.
        """
        code = str(reply).split(" ", 1)[0]
        if code in _REDIRECT_CODES:
            return True
        self.counters.bump(f"redis_error_{code.lower() if code.isalpha() else 'other'}")
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

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        client = self.client()
        hasher = self._hasher()
        rkeys = [self.key_prefix + key for key in keys]
        results = [False] * len(keys)
        redirected: list[int] = []
        groups = self._by_node(client, rkeys, range(len(keys)))
        requests = [(node, [(rkeys[i].encode(), pages[i]) for i in indices]) for node, indices in groups]
        outcomes = get_pages(requests, hasher, self._chunk, self._budget())
        for index, reply in self._answers(groups, outcomes, redirected):
            results[index] = self._check(reply, keys[index], pages[index], want)
        if redirected and time_left(self.timeout_s) > 0:  # MOVED/ASK: redis-py follows redirects
            self.counters.bump("redirected_reads", len(redirected))
            pipe = client.pipeline(transaction=False)
            for index in redirected:
                pipe.get(rkeys[index])
            for index, value in zip(redirected, pipe.execute(raise_on_error=False), strict=True):
                if not isinstance(value, Exception):
                    results[index] = self._decode(value, keys[index], pages[index], want)
        return results

    def _check(self, reply: Filled | bytes | None, key: str, page: list[memoryview], want: int) -> bool:
        """Whether a GET reply delivered this key's valid record into ``page`` (bad records are counted)."""
        if not isinstance(reply, Filled):
            return self._decode(reply, key, page, want)
        try:
            parsed = self._codec.check_header(reply.header, key, want - HEADER_SIZE)
        except PageRecordError:
            self.counters.bump("integrity_failures")
            return False
        if reply.digest() != parsed.checksum or not self._codec.tag_ok(parsed, key, page):
            self.counters.bump("integrity_failures")
            return False
        return True

    def _decode(self, value: bytes | None, key: str, page: list[memoryview], want: int) -> bool:
        if value is None:
            return False
        if len(value) != want or not self._codec.decode_into(value, key, page):
            self.counters.bump("integrity_failures")
            return False
        return True

    def _commands(self, keys: Sequence[str], name: bytes) -> list[Any]:
        """One ``name key`` command per key over the wire path; replies in key order (``None`` for a
        server that failed, when others answered)."""
        client = self.client()
        rkeys = [self.key_prefix + key for key in keys]
        groups = self._by_node(client, rkeys, range(len(keys)))
        requests = [(node, [command(name, rkeys[i].encode()) for i in indices]) for node, indices in groups]
        replies: list[Any] = [None] * len(keys)
        for (_node, indices), answers in self._settle(groups, run_commands(requests, self._chunk, self._budget())):
            for index, answer in zip(indices, answers, strict=True):
                if isinstance(answer, ResponseError):
                    self._is_redirect(answer)
                else:
                    replies[index] = answer
        return replies

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        return [reply == want for reply in self._commands(keys, b"STRLEN")]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return [isinstance(reply, int) for reply in self._commands(keys, b"DEL")]

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Delete the keys of the key spaces ``prefixes`` under ``key_prefix`` (``None``: every key under
        it); SCAN on every primary in cluster mode."""
        client = self.client()
        starts = [""] if prefixes is None else list(prefixes)
        for start in starts:
            pattern = glob_escape(self.key_prefix + start) + "*"
            batch: list[bytes] = []
            for key in client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= _CLEAR_BATCH:
                    self._delete_raw(batch)
                    batch = []
            if batch:
                self._delete_raw(batch)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Keys from a SCAN under ``key_prefix`` (every primary in cluster mode), in key order, sizes by STRLEN.

        Each call scans again and resumes after the cursor key; Redis keeps no write time.
        """
        client = self.client()
        names = sorted(
            name
            for raw in client.scan_iter(match=glob_escape(self.key_prefix + prefix) + "*", count=1000)
            if _PAGE_KEY.fullmatch(
                name := (raw.decode() if isinstance(raw, bytes) else str(raw))[len(self.key_prefix) :]
            )
            and (cursor is None or name > cursor)
        )
        chosen = names[:limit]
        pipe = client.pipeline(transaction=False)
        for name in chosen:
            pipe.strlen(self.key_prefix + name)
        sizes = pipe.execute() if chosen else []
        pages = [StoredPage(name, int(size)) for name, size in zip(chosen, sizes, strict=True) if size]
        return pages, (chosen[-1] if len(names) > limit else None)

    def _delete_raw(self, keys: list[bytes]) -> None:
        pipe = self.client().pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        pipe.execute()

    def release(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
            hasher, self._hash_pool = self._hash_pool, None
            building, self._building = self._building, None
        if hasher is not None:
            hasher.shutdown(wait=True)
        if client is None and building is not None and building.done() and building.exception() is None:
            client = building.result()  # built after the last call stopped waiting for it
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"<RedisBackend {self.options!r}>"
