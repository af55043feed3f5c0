"""Helpers shared by the slab backend's tests."""

from __future__ import annotations

import contextlib
import mmap
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hicache_storage_slab import SlabBackend
from hicache_storage_slab.allocator import WriteTxn
from hicache_storage_slab.geometry import ENTRY_COST, INDEX_OVERHEAD, MIN_INDEX_BYTES, StoreGeometry
from hicache_storage_slab.index import SlabIndex, Written
from hicache_storage_slab.records import Entry, Region, key_digest, unpack
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
        model_name=model,
        dtype="uint8",
        layout="page_first",
        page_size=1,
        page_bytes=page_bytes,
        is_mla=False,
        pool=pool,
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


# ----------------------------------------------------------------------------- an index on its own
REGION = 64 << 10


def small_geometry(regions: int = 4, region_bytes: int = REGION) -> StoreGeometry:
    """A store of ``regions`` regions and the smallest index (64 pages at most)."""
    return StoreGeometry(
        capacity_bytes=8 * MIB,
        index_bytes=MIN_INDEX_BYTES,
        region_bytes=region_bytes,
        regions=regions,
        file_bytes=regions * region_bytes,
        files=1,
        max_pages=(MIN_INDEX_BYTES - INDEX_OVERHEAD) // ENTRY_COST,
    )


@contextlib.contextmanager
def write_txn(index: SlabIndex, now: int | None = None) -> Iterator[WriteTxn]:
    """One write transaction of ``index`` (at ``now``), its cached records flushed before it commits."""
    with index.env.begin(write=True) as raw:
        txn = WriteTxn(raw, index.db, index.geometry, time.time_ns() if now is None else now)
        yield txn
        txn.flush()


def count(index: SlabIndex, database: str) -> int:
    """Records in one of the index's databases."""
    with index.env.begin() as txn:
        return int(txn.stat(getattr(index.db, database))["entries"])


def region_of(index: SlabIndex, region: int) -> Region | None:
    with index.env.begin(db=index.db.regions) as txn:
        raw = txn.get(region.to_bytes(4, "big"))
    return unpack(Region, raw) if raw is not None else None


def spare_regions(index: SlabIndex) -> list[int]:
    with index.env.begin(db=index.db.spare) as txn:
        return [int.from_bytes(key, "big") for key in txn.cursor().iternext(keys=True, values=False)]


def put_page(
    index: SlabIndex,
    name: str,
    chunk: int,
    *,
    age_s: float,
    chunks: int = 1,
    tier: int = 0,
    namespace: str = "",
    quota: int | None = None,
) -> tuple[bool, int]:
    """Stage and commit a page of ``chunks`` chunks made recent ``age_s`` seconds ago; (stored, evicted)."""
    digest = key_digest(name.encode())
    (staged,), outcome = index.stage([(digest, chunk, chunks)], namespace, quota=quota, sweep=False)
    if staged is None:
        return False, outcome.evicted
    seq = time.time_ns() - int(age_s * 1e9)
    entry = Entry(tier, 0, chunk, chunk * chunks, seq, 0, 0, tuple(staged.refs), b"", name.encode())
    committed = index.commit([Written(staged, entry)], namespace)
    return committed.results == [True], outcome.evicted + committed.evicted


def stored(index: SlabIndex, names: list[str]) -> list[bool]:
    return index.contains([key_digest(name.encode()) for name in names])
