"""Helpers shared by the slab backend's tests."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hicache_storage_slab import SlabBackend
from hicache_storage_slab.layout import COMMITTED, ENTRY_SIZE, Entry, decode_entry, key_digest

from hicache_storage import HostKVPool
from hicache_storage import testing as kit
from hicache_storage.batch_context import BatchContext

indices = kit.page_indices
page_bytes = kit.page_bytes


def make_pool(num_pages: int = 16, **kwargs: Any) -> HostKVPool:
    return kit.make_pool(num_pages=num_pages, seed=11, **kwargs)


def make_backend(root: Path | str, pool: HostKVPool | None = None, **options: Any) -> SlabBackend:
    """A slab backend below ``root`` (4 MiB per key space unless given), resilience off, pool registered."""
    extra = {"path": str(root), "resilience": False, "capacity_bytes": 4 << 20, **options}
    return kit.make_backend(SlabBackend, extra, pool if pool is not None else make_pool())


def context(backend: SlabBackend, pool: str = "kv") -> BatchContext:
    return backend.batch_context(pool)


def storage_keys(backend: SlabBackend, keys: list[str]) -> list[str]:
    return backend.pool_keyspace().storage_keys(keys)


class AlignedPages:
    """Pages in page-aligned anonymous memory (what ``O_DIRECT`` can move), ``segments`` per page."""

    def __init__(self, count: int, page_bytes: int, segments: int = 2) -> None:
        assert page_bytes % segments == 0
        self.memory = mmap.mmap(-1, count * page_bytes)
        self.view = memoryview(self.memory)
        step = page_bytes // segments
        self.pages = [
            [self.view[p * page_bytes + s * step : p * page_bytes + (s + 1) * step] for s in range(segments)]
            for p in range(count)
        ]

    def fill(self, page: int, data: bytes) -> None:
        offset = 0
        for segment in self.pages[page]:
            segment[:] = data[offset : offset + segment.nbytes]
            offset += segment.nbytes

    def data(self, page: int) -> bytes:
        return b"".join(bytes(s) for s in self.pages[page])


def set_entries(backend: SlabBackend, storage_key: str, pool: str = "kv") -> Iterator[tuple[int, Entry]]:
    """(header offset, decoded header) of every slot in the set of ``storage_key``."""
    slab = backend.slab(backend.pool_keyspace(pool))
    index, local_set = slab.geometry.locate(key_digest(storage_key))
    fd = slab.files[index].fd
    base = slab.geometry.set_header_offset(local_set)
    raw = os.pread(fd, slab.geometry.ways * ENTRY_SIZE, base)
    for way in range(slab.geometry.ways):
        yield base + way * ENTRY_SIZE, decode_entry(raw[way * ENTRY_SIZE : (way + 1) * ENTRY_SIZE])


def committed_copies(backend: SlabBackend, storage_key: str, pool: str = "kv") -> int:
    """Committed headers of ``storage_key`` in its set."""
    digest = key_digest(storage_key)
    return sum(1 for _o, e in set_entries(backend, storage_key, pool) if e.state == COMMITTED and e.digest == digest)
