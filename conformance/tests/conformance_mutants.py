"""Deliberately broken backends, each breaking one rule of the contract; the suite must fail every one.

Two kinds. *Backend mutants* implement :class:`hicache_storage.plugin.Backend` and get a rule of the
primitives wrong (keys, bytes, visibility, swallowed errors). *Caller mutants* are classes written
against SGLang's own surface, as SGLang's in-tree backends are: they hold a correct caller instance
and get one of the caller's rules wrong (a count, ``None`` for a list, a v2 call that writes half a
request), which a backend on the SDK's face no longer can. ``MUTANTS`` maps a mutant's class name to
(the rule it breaks, the category expected to catch it); :class:`MutantHooks` reaches both kinds'
stored records and switches their store off and on, except for ``HOOKLESS`` mutants.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import torch
from hicache_storage_conformance.reference import _LOCK, MemoryBackend

from hicache_storage import HiCacheStorage, HiCacheStorageExtraInfo, PoolHitPolicy, PoolTransferResult, load_backend
from hicache_storage.plugin import KV_POOL, BackendSetup, BatchContext, KeySpace
from hicache_storage.plugin.page_format import HEADER_SIZE, decode_into, encode_record
from hicache_storage.pools.plan import hit_policy_of

Page = list[memoryview]


# ----------------------------------------------------------------------------- backend mutants
def _bare_and_ranks(key: str, context: BatchContext) -> tuple[str, str]:
    """(bare key, rank suffix) of a storage key of ``context``'s key space."""
    space = context.keyspace
    return key[len(space.prefix) : -(len(space.rank_suffix) + 1)], space.rank_suffix


class KeysWithoutRanks(MemoryBackend):
    """Files pages under their key without the rank coordinates: every tp rank writes the same record."""

    def _key(self, key: str, context: BatchContext) -> str:
        if context.record_bytes is not None:
            return key
        bare, _ranks = _bare_and_ranks(key, context)
        return context.keyspace.prefix + bare

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages([self._key(k, context) for k in keys], pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().read_pages([self._key(k, context) for k in keys], pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().pages_exist([self._key(k, context) for k in keys], context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().delete_pages([self._key(k, context) for k in keys], context)


class KeysWithoutKeySpace(KeysWithoutRanks):
    """Files pages by bare hash and ranks only, dropping the key-space prefix (model, namespace, geometry)."""

    def _key(self, key: str, context: BatchContext) -> str:
        if context.record_bytes is not None:
            return key
        bare, ranks = _bare_and_ranks(key, context)
        return f"{bare}.{ranks}"


class StaleOverwrite(MemoryBackend):
    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        fresh = [(k, p) for k, p in zip(keys, pages) if k not in self.store]
        super().write_pages([k for k, _ in fresh], [p for _, p in fresh], context)
        return [True] * len(keys)


class AcceptsTruncated(MemoryBackend):
    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        out = []
        for key, page in zip(keys, pages):
            record = self.store.get(key)
            if record is None:
                out.append(False)
                continue
            payload = memoryview(record)[HEADER_SIZE:]
            offset = 0
            for segment in page:
                chunk = payload[offset : offset + segment.nbytes]
                segment[: len(chunk)] = chunk
                offset += segment.nbytes
            out.append(True)
        return out


class VisibleEarly(MemoryBackend):
    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        for key, page in zip(keys, pages):
            record = encode_record(page)
            partial = bytearray(len(record))
            with _LOCK:
                self.store[key] = partial  # type: ignore[assignment]
            step = max(1, len(record) // 4)
            for begin in range(0, len(record), step):
                partial[begin : begin + step] = record[begin : begin + step]
                time.sleep(0.001)
            with _LOCK:
                self.store[key] = record
        return [True] * len(keys)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            records = [self.store.get(key) for key in keys]
        return [r is not None and decode_into(bytes(r), p) for r, p in zip(records, pages)]


class SwapsPages(MemoryBackend):
    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        if len(keys) >= 2:
            keys = [keys[1], keys[0], *keys[2:]]
        return super().read_pages(keys, pages, context)


class FlipsByte(MemoryBackend):
    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        flipped = []
        for page in pages:
            data = bytearray(b"".join(bytes(s) for s in page))
            data[len(data) // 2] ^= 0x01
            flipped.append([memoryview(data)])
        return super().write_pages(keys, flipped, context)


class DeleteKeepsPages(MemoryBackend):
    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return [True] * len(keys)


class _KnowsKV(MemoryBackend):
    """Remembers the KV pool's key space (from ``on_register_pool``), to map other pools' keys onto it."""

    def __init__(self, setup: BackendSetup[Any]) -> None:
        super().__init__(setup)
        self.kv_space: KeySpace | None = None

    def on_register_pool(self, pool: Any, keyspace: KeySpace) -> None:
        if keyspace.pool == KV_POOL:
            self.kv_space = keyspace

    def _as_kv(self, keys: Sequence[str], context: BatchContext) -> list[str]:
        if self.kv_space is None or context.record_bytes is not None:
            return list(keys)
        return [self.kv_space.storage_key(_bare_and_ranks(key, context)[0]) for key in keys]


class PoolsShareKeys(_KnowsKV):
    """Strips the pool out of storage keys: every pool's page of one hash lands on the KV page's key."""

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages(self._as_kv(keys, context), pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().read_pages(self._as_kv(keys, context), pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().pages_exist(self._as_kv(keys, context), context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().delete_pages(self._as_kv(keys, context), context)


class SidecarExistsByKVKey(_KnowsKV):
    """Answers a sidecar page's existence from the KV page of its hash (an index keyed by hash, not pool)."""

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        if context.pool != KV_POOL:
            keys = self._as_kv(keys, context)
        return super().pages_exist(keys, context)


class SidecarKeysIgnoreGeometry(MemoryBackend):
    """Files sidecar pages under a key space rebuilt without the pool's geometry (state shapes, heads, layers)."""

    def _key(self, key: str, context: BatchContext) -> str:
        if context.pool in (KV_POOL, "") or context.record_bytes is not None:
            return key
        bare, _ranks = _bare_and_ranks(key, context)
        return dataclasses.replace(context.keyspace, geometry=()).storage_key(bare)

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages([self._key(k, context) for k in keys], pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().read_pages([self._key(k, context) for k in keys], pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().pages_exist([self._key(k, context) for k in keys], context)


class SwallowsWriteErrors(MemoryBackend):
    """Wraps its store writes in try/except and answers True anyway ("the store will catch up")."""

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        try:
            return super().write_pages(keys, pages, context)
        except Exception:
            return [True] * len(keys)


class SwallowsWriteErrorsNoHooks(SwallowsWriteErrors):
    """SwallowsWriteErrors offering the suite no hook at all (see ``HOOKLESS``)."""


class SwallowsReadErrors(MemoryBackend):
    """Catches every error while filling a page and reports the page read."""

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        out = []
        for key, page in zip(keys, pages):
            try:
                out.extend(super().read_pages([key], [page], context))
            except Exception:
                out.append(key in self.store)
        return out


class CopiesThroughBytes(MemoryBackend):
    """Declares zero_copy but moves every page through an intermediate ``bytes`` of the page's size."""

    capabilities = dataclasses.replace(MemoryBackend.capabilities, zero_copy=True)

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages(keys, [[memoryview(b"".join(bytes(s) for s in page))] for page in pages], context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        out = []
        for key, page in zip(keys, pages):
            staging = bytearray(sum(segment.nbytes for segment in page))
            hit = super().read_pages([key], [[memoryview(staging)]], context)[0]
            offset = 0
            for segment in page:
                segment.cast("B")[:] = staging[offset : offset + segment.nbytes]
                offset += segment.nbytes
            out.append(hit)
        return out


_SHARD = re.compile(r"\.h(\d+)of(\d+)\.")


class ShardsByWriterRank(MemoryBackend):
    """Files head shards under the writer's tp rank too: a rank reads back its own shards, no other TP size can."""

    def __init__(self, setup: BackendSetup[Any]) -> None:
        super().__init__(setup)
        self.writer = f"w{setup.config.tp_rank}of{setup.config.tp_size}." if setup.config is not None else ""

    def _key(self, key: str) -> str:
        return _SHARD.sub(lambda match: f"{match.group(0)}{self.writer}", key)

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages([self._key(k) for k in keys], pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().read_pages([self._key(k) for k in keys], pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().pages_exist([self._key(k) for k in keys], context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().delete_pages([self._key(k) for k in keys], context)


class HalfPageHit(MemoryBackend):
    """A missing head shard counts as found when another shard of its page is stored (a half-filled hit)."""

    def _sibling(self, key: str) -> bool:
        match = _SHARD.search(key)
        if match is None:
            return False
        head, tail = key[: match.start()], key[match.end() :]
        with _LOCK:
            return any(f"{head}.h{j}of{match.group(2)}.{tail}" in self.store for j in range(int(match.group(2))))

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        found = super().read_pages(keys, pages, context)
        return [hit or self._sibling(key) for key, hit in zip(keys, found)]

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        found = super().pages_exist(keys, context)
        return [hit or self._sibling(key) for key, hit in zip(keys, found)]


# ----------------------------------------------------------------------------- caller mutants (SGLang surface)
class CallerMutant:
    """A class with SGLang's storage surface over a correct caller instance (``self.storage``), as an SGLang
    backend would be; subclasses get one caller rule wrong."""

    def __init__(self, storage_config: Any, kwargs: dict[str, Any] | None = None) -> None:
        self.storage: HiCacheStorage = load_backend(MemoryBackend, storage_config)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.storage.register_mem_pool_host(mem_pool_host)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.storage.get(key, target_location, target_sizes)

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        return self.storage.batch_get(keys, target_locations, target_sizes)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.storage.set(key, value, target_location, target_sizes)

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        return self.storage.batch_set(keys, values, target_locations, target_sizes)

    def exists(self, key: str) -> bool:
        return self.storage.exists(key)

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        return self.storage.batch_exists(keys, extra_info)

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return self.storage.batch_get_v1(keys, host_indices, extra_info)

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return self.storage.batch_set_v1(keys, host_indices, extra_info)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        self.storage.register_mem_host_pool_v2(host_pool, host_pool_name)

    def on_host_pools_registered(self) -> None:
        self.storage.on_host_pools_registered()

    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        return self.storage.batch_exists_v2(keys, pool_transfers, extra_info)

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return self.storage.batch_get_v2(transfers, extra_info)

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return self.storage.batch_set_v2(transfers, extra_info)

    def clear(self) -> None:
        self.storage.clear()

    def close(self) -> None:
        self.storage.close()


class PrefixAsTotal(CallerMutant):
    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        return sum(self.storage.batch_exists_each(keys, extra_info))


class RaisesWhenDown(CallerMutant):
    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        memory = self.storage.backend
        assert isinstance(memory, MemoryBackend)
        if not memory.available:
            raise ConnectionError("connection refused")
        return super().batch_get_v1(keys, host_indices, extra_info)


class NoneFromV1(CallerMutant):
    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> Any:
        result = super().batch_get_v1(keys, host_indices, extra_info)
        return result if any(result) else None


class IgnoresSlotOffset(CallerMutant):
    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return super().batch_get_v1(keys, torch.arange(len(host_indices)), extra_info)

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return super().batch_set_v1(keys, torch.arange(len(host_indices)), extra_info)


class ClaimsTrailingWindow(CallerMutant):
    """batch_exists_v2 never checks a trailing window: it claims every prefix the other pools allow."""

    def batch_exists_v2(
        self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None
    ) -> PoolTransferResult:
        transfers = list(pool_transfers or [])
        windows = [t for t in transfers if hit_policy_of(t) is PoolHitPolicy.TRAILING_PAGES]
        others = [t for t in transfers if hit_policy_of(t) is not PoolHitPolicy.TRAILING_PAGES]
        result = self.storage.batch_exists_v2(keys, others, extra_info)
        for transfer in windows:
            if result.kv_hit_pages:
                result.extra_pool_hit_pages[transfer.name] = result.kv_hit_pages
        return result


# ----------------------------------------------------------------------------- hooks
def _memory(backend: Any) -> MemoryBackend:
    inner = backend.storage.backend if isinstance(backend, CallerMutant) else backend
    assert isinstance(inner, MemoryBackend)
    return inner


class _ByBareKey(MutableMapping[str, bytes]):
    """A caller mutant's records by the bare keys the suite names them with on SGLang's surface."""

    def __init__(self, mutant: CallerMutant) -> None:
        self.store = _memory(mutant).store
        self.mutant = mutant

    def _key(self, key: str) -> str:
        space = self.mutant.storage.keyspace
        assert space is not None
        return space.storage_key(key)

    def __getitem__(self, key: str) -> bytes:
        return self.store[self._key(key)]

    def __setitem__(self, key: str, value: bytes) -> None:
        self.store[self._key(key)] = value

    def __delitem__(self, key: str) -> None:
        del self.store[self._key(key)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.store)

    def __len__(self) -> int:
        return len(self.store)


class MutantHooks:
    """The reference backend's side channel and outage switch, for either kind of mutant."""

    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        return _ByBareKey(backend) if isinstance(backend, CallerMutant) else _memory(backend).store

    def stop_server(self, backend: Any) -> None:
        _memory(backend).available = False

    def start_server(self, backend: Any) -> None:
        _memory(backend).available = True


#: name → (rule broken, category expected to catch it)
MUTANTS: dict[str, tuple[str, str]] = {
    "PrefixAsTotal": ("batch_exists returns the total count of hits, not the leading run", "batch"),
    "KeysWithoutRanks": ("storage keys lose the tp rank and size", "isolation"),
    "StaleOverwrite": ("an overwrite keeps the old bytes", "overwrite"),
    "AcceptsTruncated": ("a truncated stored page is returned as data", "integrity"),
    "RaisesWhenDown": ("an exception escapes batch_get_v1 when the server is gone", "faults"),
    "NoneFromV1": ("batch_get_v1 returns None when nothing hits", "batch"),
    "VisibleEarly": ("a key is visible before its page is fully written", "concurrency"),
    "SwapsPages": ("pages come back swapped within a batch", "batch"),
    "IgnoresSlotOffset": ("host_indices offsets are ignored (always slots 0..n-1)", "roundtrip"),
    "FlipsByte": ("one byte of every page is flipped on write", "roundtrip"),
    "KeysWithoutKeySpace": ("storage keys lose the key space (model, namespace, geometry)", "isolation"),
    "DeleteKeepsPages": ("delete reports success but the pages stay readable", "delete"),
    "PoolsShareKeys": ("storage keys ignore the pool: a Mamba page and the KV page of one hash alias", "multi_pool"),
    "ClaimsTrailingWindow": ("batch_exists_v2 reports trailing windows it does not hold", "multi_pool"),
    "SidecarExistsByKVKey": (
        "a sidecar page exists wherever the KV page of its hash does: restorable prefixes it cannot load",
        "multi_pool",
    ),
    "SidecarKeysIgnoreGeometry": ("sidecar storage keys ignore the pool's geometry", "multi_pool"),
    "SwallowsWriteErrors": ("a write whose store call fails is acknowledged True (errors swallowed)", "faults"),
    "SwallowsWriteErrorsNoHooks": ("the same, and the backend offers no fault hook or side channel at all", "faults"),
    "SwallowsReadErrors": ("a read that fails while filling the page reports a hit (errors swallowed)", "faults"),
    "CopiesThroughBytes": ("declares zero_copy but copies every page through an intermediate bytes", "zero_copy"),
    "ShardsByWriterRank": ("head shards are keyed by the writer's tp rank: other TP sizes never find them", "cross_tp"),
    "HalfPageHit": ("a page with a missing head shard is reported (and read) as a hit", "cross_tp"),
}

#: Mutants run with no hooks at all (what a test needing no hook must still catch).
HOOKLESS = frozenset({"SwallowsWriteErrorsNoHooks"})
