"""Deliberately broken backends, each breaking one rule of the contract; the suite must fail every one.

``MUTANTS`` maps a mutant's class name to (the rule it breaks, the category expected to catch it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch
from hicache_storage_conformance.reference import _LOCK, MemoryBackend

from hicache_storage import HiCacheStorageExtraInfo, PoolHitPolicy, PoolTransferResult
from hicache_storage.pools import KV_POOL, BatchContext
from hicache_storage.plugin.page_format import HEADER_SIZE, decode_into, encode_record
from hicache_storage.pools.plan import hit_policy_of

Page = list[memoryview]


class PrefixAsTotal(MemoryBackend):
    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        return sum(self.batch_exists_each(keys, extra_info))


def _rekey_kv(backend: MemoryBackend, **changes: Any) -> None:
    """Replace fields of the KV pool's registered key space (what every KV storage key is built from)."""
    entry = backend._hc_pools.get(KV_POOL)
    entry.keyspace = dataclasses.replace(entry.keyspace, **changes)
    backend.keyspace = entry.keyspace


class IgnoresTpRank(MemoryBackend):
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        _rekey_kv(self, tp_rank=0, tp_size=1)


class IgnoresNamespace(MemoryBackend):
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        _rekey_kv(self, namespace="")


class StaleOverwrite(MemoryBackend):
    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        fresh = [(k, p) for k, p in zip(keys, pages) if k not in self.raw_store()]
        super().write_pages([k for k, _ in fresh], [p for _, p in fresh], context)
        return [True] * len(keys)


class AcceptsTruncated(MemoryBackend):
    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        out = []
        for key, page in zip(keys, pages):
            record = self.raw_store().get(key)
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


class RaisesWhenDown(MemoryBackend):
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        if not self._available:
            raise ConnectionError("connection refused")
        return super().batch_get_v1(keys, host_indices, extra_info)


class NoneFromV1(MemoryBackend):
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> Any:
        result = super().batch_get_v1(keys, host_indices, extra_info)
        return result if any(result) else None


class VisibleEarly(MemoryBackend):
    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        for key, page in zip(keys, pages):
            record = encode_record(page)
            partial = bytearray(len(record))
            with _LOCK:
                self.raw_store()[key] = partial  # type: ignore[assignment]
            step = max(1, len(record) // 4)
            for begin in range(0, len(record), step):
                partial[begin : begin + step] = record[begin : begin + step]
                time.sleep(0.001)
            with _LOCK:
                self.raw_store()[key] = record
        return [True] * len(keys)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        self._check()
        with _LOCK:
            records = [self.raw_store().get(key) for key in keys]
        return [r is not None and decode_into(bytes(r), p) for r, p in zip(records, pages)]


class SwapsPages(MemoryBackend):
    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        if len(keys) >= 2:
            keys = [keys[1], keys[0], *keys[2:]]
        return super().read_pages(keys, pages, context)


class IgnoresSlotOffset(MemoryBackend):
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        return super().batch_get_v1(keys, torch.arange(len(host_indices)), extra_info)

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        return super().batch_set_v1(keys, torch.arange(len(host_indices)), extra_info)


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


def _as_kv_keys(backend: MemoryBackend, keys: Sequence[str], context: BatchContext) -> list[str]:
    """``keys`` of ``context``'s pool turned into the KV pool's storage keys of the same page hashes."""
    space = context.keyspace
    head, tail = len(space.prefix), len(space.rank_suffix) + 1
    kv = backend.pool_keyspace(KV_POOL)
    return [kv.storage_key(key[head:-tail]) for key in keys]


class PoolsShareKeys(MemoryBackend):
    """Strips the pool out of storage keys: every pool's page of one hash lands on the KV page's key."""

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().write_pages(_as_kv_keys(self, keys, context), pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        return super().read_pages(_as_kv_keys(self, keys, context), pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().pages_exist(_as_kv_keys(self, keys, context), context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return super().delete_pages(_as_kv_keys(self, keys, context), context)


class ClaimsTrailingWindow(MemoryBackend):
    """batch_exists_v2 never checks a trailing window: it claims every prefix the other pools allow."""

    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: Sequence[Any] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        transfers = list(pool_transfers or [])
        windows = [t for t in transfers if hit_policy_of(t) is PoolHitPolicy.TRAILING_PAGES]
        others = [t for t in transfers if hit_policy_of(t) is not PoolHitPolicy.TRAILING_PAGES]
        result = super().batch_exists_v2(keys, others, extra_info)
        for transfer in windows:
            if result.kv_hit_pages:
                result.extra_pool_hit_pages[transfer.name] = result.kv_hit_pages
        return result


class SidecarExistsByKVKey(MemoryBackend):
    """Answers a sidecar page's existence from the KV page of its hash (an index keyed by hash, not pool)."""

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        if context.pool != KV_POOL:
            keys = _as_kv_keys(self, keys, context)
        return super().pages_exist(keys, context)


class SidecarKeysIgnoreGeometry(MemoryBackend):
    """Sidecar key spaces carry the pool name but not its geometry (state shapes, heads, layers)."""

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        entry = self._hc_pools.get(host_pool_name)
        if entry.name != KV_POOL:
            entry.keyspace = dataclasses.replace(entry.keyspace, geometry=())


class ValidatesPerTransfer(MemoryBackend):
    """batch_set_v2 checks and writes one transfer at a time: a bad later transfer leaves earlier ones written."""

    def batch_set_v2(
        self, transfers: Sequence[Any], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[Any, list[bool]]:
        results: dict[Any, list[bool]] = {}
        for transfer in transfers:
            for name, flags in super().batch_set_v2([transfer], extra_info).items():
                results[name] = results.get(name, []) + flags
        return results


class SwallowsWriteErrors(MemoryBackend):
    """Wraps its store writes in try/except and answers True anyway ("the store will catch up")."""

    def write_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        try:
            return super().write_pages(keys, pages, context)
        except Exception:
            return [True] * len(keys)


class SwallowsWriteErrorsNoHooks(SwallowsWriteErrors):
    """SwallowsWriteErrors offering the suite no hook at all: no raw_store(), no set_available()."""

    raw_store = None  # type: ignore[assignment]
    set_available = None  # type: ignore[assignment]


class SwallowsReadErrors(MemoryBackend):
    """Catches every error while filling a page and reports the page read."""

    def read_pages(self, keys: Sequence[str], pages: Sequence[Page], context: BatchContext) -> list[bool]:
        out = []
        for key, page in zip(keys, pages):
            try:
                out.extend(super().read_pages([key], [page], context))
            except Exception:
                out.append(key in self._store)
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


#: name → (rule broken, category expected to catch it)
MUTANTS: dict[str, tuple[str, str]] = {
    "PrefixAsTotal": ("batch_exists returns the total count of hits, not the leading run", "batch"),
    "IgnoresTpRank": ("storage keys ignore the tp rank and size", "isolation"),
    "StaleOverwrite": ("an overwrite keeps the old bytes", "overwrite"),
    "AcceptsTruncated": ("a truncated stored page is returned as data", "integrity"),
    "RaisesWhenDown": ("an exception escapes batch_get_v1 when the server is gone", "faults"),
    "NoneFromV1": ("batch_get_v1 returns None when nothing hits", "batch"),
    "VisibleEarly": ("a key is visible before its page is fully written", "concurrency"),
    "SwapsPages": ("pages come back swapped within a batch", "batch"),
    "IgnoresSlotOffset": ("host_indices offsets are ignored (always slots 0..n-1)", "roundtrip"),
    "FlipsByte": ("one byte of every page is flipped on write", "roundtrip"),
    "IgnoresNamespace": ("storage keys ignore the namespace", "isolation"),
    "DeleteKeepsPages": ("delete reports success but the pages stay readable", "delete"),
    "PoolsShareKeys": ("storage keys ignore the pool: a Mamba page and the KV page of one hash alias", "multi_pool"),
    "ClaimsTrailingWindow": ("batch_exists_v2 reports trailing windows it does not hold", "multi_pool"),
    "SidecarExistsByKVKey": (
        "a sidecar page exists wherever the KV page of its hash does: restorable prefixes it cannot load",
        "multi_pool",
    ),
    "SidecarKeysIgnoreGeometry": ("sidecar storage keys ignore the pool's geometry", "multi_pool"),
    "ValidatesPerTransfer": ("batch_set_v2 writes earlier transfers before rejecting a bad one", "multi_pool"),
    "SwallowsWriteErrors": ("a write whose store call fails is acknowledged True (errors swallowed)", "faults"),
    "SwallowsWriteErrorsNoHooks": ("the same, and the backend offers no fault hook or side channel at all", "faults"),
    "SwallowsReadErrors": ("a read that fails while filling the page reports a hit (errors swallowed)", "faults"),
    "CopiesThroughBytes": ("declares zero_copy but copies every page through an intermediate bytes", "zero_copy"),
}
