"""Helpers shared by the slab backend's tests."""

from __future__ import annotations

import mmap
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hicache_storage_slab import SlabBackend
from hicache_storage_slab.layout import COMMITTED, ENTRY_SIZE, Entry, decode_entry, key_digest
from hicache_storage_slab.slab import Slab

from hicache_storage import HiCacheStorage, HostKVPool
from hicache_storage import testing as kit
from hicache_storage.plugin import BatchContext

indices = kit.page_indices
page_bytes = kit.page_bytes


def make_pool(num_pages: int = 16, **kwargs: Any) -> HostKVPool:
    return kit.make_pool(num_pages=num_pages, seed=11, **kwargs)


def make_backend(root: Path | str, pool: HostKVPool | None = None, **options: Any) -> HiCacheStorage:
    """Storage over a slab backend below ``root`` (4 MiB per key space unless given), resilience off, no
    manifest (its records would open a second slab beside the pages'), one set per key unless
    ``choices`` is given (the tests of a set's order and format address one set), a pool."""
    extra = {
        "path": str(root),
        "resilience": False,
        "capacity_bytes": 4 << 20,
        "manifests": False,
        "choices": 1,
        **options,
    }
    return kit.make_backend(SlabBackend, extra, pool if pool is not None else make_pool())


def slab_backend(storage: HiCacheStorage) -> SlabBackend:
    """The slab backend ``storage`` holds (for its primitives, slabs and files)."""
    backend = storage.backend
    assert isinstance(backend, SlabBackend)
    return backend


def kv_slab(storage: HiCacheStorage, pool: str = "kv") -> Slab:
    """The slab of ``pool``'s key space."""
    return slab_backend(storage).slab(storage.pool_keyspace(pool))


def context(backend: HiCacheStorage, pool: str = "kv") -> BatchContext:
    return backend.batch_context(pool)


def storage_keys(backend: HiCacheStorage, keys: list[str]) -> list[str]:
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


def set_entries(backend: HiCacheStorage, storage_key: str, pool: str = "kv") -> Iterator[tuple[int, Entry]]:
    """(header offset, decoded header) of every slot in the set of ``storage_key``."""
    slab = kv_slab(backend, pool)
    index, local_set = slab.geometry.locate(key_digest(storage_key))
    fd = slab.files[index].fd
    base = slab.geometry.set_header_offset(local_set)
    raw = os.pread(fd, slab.geometry.ways * ENTRY_SIZE, base)
    for way in range(slab.geometry.ways):
        yield base + way * ENTRY_SIZE, decode_entry(raw[way * ENTRY_SIZE : (way + 1) * ENTRY_SIZE])


def committed_copies(backend: HiCacheStorage, storage_key: str, pool: str = "kv") -> int:
    """Committed headers of ``storage_key`` in its set."""
    digest = key_digest(storage_key)
    return sum(1 for _o, e in set_entries(backend, storage_key, pool) if e.state == COMMITTED and e.digest == digest)


def keys_in_one_set(backend: HiCacheStorage, count: int) -> list[str]:
    """``count`` bare keys whose storage keys share one set of the KV slab."""
    space = backend.pool_keyspace()
    slab_ = kv_slab(backend)
    groups: dict[tuple[int, int], list[str]] = defaultdict(list)
    for key in kit.random_keys(400 * count):
        group = groups[slab_.set_of(space.storage_key(key))]
        group.append(key)
        if len(group) == count:
            return group
    raise AssertionError("no set got enough keys")
