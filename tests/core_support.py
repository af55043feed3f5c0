"""Support code for the core tests: an in-memory reference backend and small host pools."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from hicache_storage import HiCacheStorage, HostKVPool
from hicache_storage.plugin import Backend, BackendSetup, BatchContext, Capabilities, PageBuffers
from hicache_storage.plugin.page_format import decode_into, encode_record


class MemoryBackend(Backend):
    """A correct dict-backed backend used to test the caller API and its layers."""

    capabilities = Capabilities(supports_delete=True, supports_clear=True, verifies_integrity=True, max_batch_size=16)

    def __init__(self, setup: BackendSetup[Any]) -> None:
        self.records: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.primitive_calls: list[tuple[str, int]] = []

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        self.primitive_calls.append(("write", len(keys)))
        with self.lock:
            for key, page in zip(keys, pages):
                self.records[key] = encode_record(page)
        return [True] * len(keys)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        self.primitive_calls.append(("read", len(keys)))
        with self.lock:
            return [key in self.records and decode_into(self.records[key], page) for key, page in zip(keys, pages)]

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self.primitive_calls.append(("exists", len(keys)))
        with self.lock:
            return [key in self.records for key in keys]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        with self.lock:
            for key in keys:
                self.records.pop(key, None)
        return [True] * len(keys)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        with self.lock:
            if prefixes is None:
                self.records.clear()
            for key in [key for key in self.records if prefixes is not None and key.startswith(tuple(prefixes))]:
                del self.records[key]


def memory_of(storage: HiCacheStorage) -> MemoryBackend:
    """The :class:`MemoryBackend` a storage instance holds."""
    backend = storage.backend
    assert isinstance(backend, MemoryBackend)
    return backend


def make_pool() -> HostKVPool:
    p = HostKVPool(
        num_pages=64, page_size=4, layer_num=2, head_num=2, head_dim=8, dtype="bfloat16", layout="page_first"
    )
    generator = torch.Generator().manual_seed(1)
    p.kv_buffer.copy_(torch.randn(p.kv_buffer.shape, generator=generator))
    return p


def page_indices(*pages: int, page_size: int = 4) -> torch.Tensor:
    """Token indices of the given page numbers."""
    return (
        torch.cat([torch.arange(p * page_size, (p + 1) * page_size) for p in pages])
        if pages
        else torch.empty(0, dtype=torch.int64)
    )
