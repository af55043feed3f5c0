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

from hicache_storage import HiCacheStorageExtraInfo
from hicache_storage.batch_context import BatchContext
from hicache_storage.page_format import decode_into, encode_record

Page = list[memoryview]


class PrefixAsTotal(MemoryBackend):
    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        return sum(self.batch_exists_each(keys, extra_info))


class IgnoresTpRank(MemoryBackend):
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        assert self.keyspace is not None
        self.keyspace = dataclasses.replace(self.keyspace, tp_rank=0, tp_size=1)


class IgnoresNamespace(MemoryBackend):
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        assert self.keyspace is not None
        self.keyspace = dataclasses.replace(self.keyspace, namespace="")


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
            payload = memoryview(record)[24:]
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
}
