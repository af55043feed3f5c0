"""Helpers shared by the slab backend's tests."""

from __future__ import annotations

import mmap
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hicache_storage_slab import SlabBackend
from hicache_storage_slab.records import key_digest
from hicache_storage_slab.store import Store

from hicache_storage import HiCacheStorage, HostKVPool, KeySpace
from hicache_storage import testing as kit
from hicache_storage.plugin import BatchContext

indices = kit.page_indices
page_bytes = kit.page_bytes
MIB = 1 << 20


def make_pool(num_pages: int = 16, **kwargs: Any) -> HostKVPool:
    return kit.make_pool(num_pages=num_pages, seed=kwargs.pop("seed", 11), **kwargs)


def big_pool(num_pages: int, page_kib: int, seed: int = 11) -> HostKVPool:
    """A seeded pool of ``page_kib`` KiB pages (4 tokens of ``page_kib / 4`` KiB: 8 layers, bf16 K and V)."""
    head_dim = page_kib * 1024 // (4 * 8 * 2 * 2)
    return kit.make_pool(num_pages=num_pages, layer_num=8, head_num=1, head_dim=head_dim, seed=seed)


def make_backend(root: Path | str, pool: HostKVPool | None = None, **options: Any) -> HiCacheStorage:
    """Storage over a slab backend below ``root`` (an 8 MiB store unless given), resilience off, no
    manifest (its records are pages of another size in the same store), a registered pool."""
    extra = {"path": str(root), "resilience": False, "capacity_bytes": 8 * MIB, "manifests": False, **options}
    model = extra.pop("model", "m")
    return kit.make_backend(SlabBackend, extra, pool if pool is not None else make_pool(), model=model)


def slab_backend(storage: HiCacheStorage) -> SlabBackend:
    """The slab backend ``storage`` holds (for its primitives and its store)."""
    backend = storage.backend
    assert isinstance(backend, SlabBackend)
    return backend


def the_store(storage: HiCacheStorage) -> Store:
    """The open store of ``storage``'s backend."""
    store = slab_backend(storage).store(create=False)
    assert store is not None
    return store


def context(storage: HiCacheStorage, pool: str = "kv") -> BatchContext:
    return storage.batch_context(pool)


def storage_keys(storage: HiCacheStorage, keys: list[str]) -> list[str]:
    return storage.pool_keyspace().storage_keys(keys)


def page_space(page_bytes: int, pool: str = "big", model: str = "m") -> tuple[KeySpace, BatchContext]:
    """A key space of ``page_bytes`` uint8 pages (one token each) and a context for the primitives."""
    space = KeySpace(
        model_name=model, dtype="uint8", layout="page_first", page_size=1, page_bytes=page_bytes, is_mla=False, pool=pool
    )
    return space, BatchContext(pool=pool, keyspace=space)


def chain(prefix_keys: list[str]) -> Any:
    """What SGLang passes as ``extra_info``: the bare keys before the call's in their chain."""
    return SimpleNamespace(prefix_keys=list(prefix_keys), extra_info=None)


def entry_of(storage: HiCacheStorage, bare_key: str) -> Any:
    """The index entry of ``bare_key`` in ``storage``'s KV key space (``None``: not stored)."""
    (skey,) = storage_keys(storage, [bare_key])
    return the_store(storage).opened.index.lookup([key_digest(skey.encode())])[0]


def disk_bytes(root: Path) -> int:
    """Bytes of disk the files below ``root`` take (``st_blocks`` x 512: what preallocation reserved)."""
    total = 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_blocks * 512
    return total


def names(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir()) if root.exists() else []


STORE_FILES = ["slab.data-0", "slab.index", "slab.index-lock", "slab.lock", "slab.state"]


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

    def close(self) -> None:
        self.pages = []
        self.view.release()
        self.memory.close()


class Clock:
    """A wall clock for the store and the index that moves only when told (and 1 µs per reading, so
    that no two batches share a time): replacement follows ``time.time_ns``."""

    def __init__(self) -> None:
        self.now = time.time_ns()

    def time_ns(self) -> int:
        self.now += 1000
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)

    def monotonic(self) -> float:
        return time.monotonic()


def call_cli(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``hicache-storage ARGS`` in another process: (exit status, stdout, stderr)."""
    code = "import sys; from hicache_storage.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    return done.returncode, done.stdout, done.stderr


__all__ = [
    "MIB",
    "STORE_FILES",
    "AlignedPages",
    "Clock",
    "big_pool",
    "call_cli",
    "chain",
    "context",
    "disk_bytes",
    "entry_of",
    "indices",
    "make_backend",
    "make_pool",
    "names",
    "page_bytes",
    "page_space",
    "slab_backend",
    "storage_keys",
    "the_store",
]
