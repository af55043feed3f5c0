"""The file backend's size limit evicts chain tails before heads: survivors always form prefixes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_file import FileBackend
from hicache_storage_file.eviction import ChainEviction, WriteOrderEviction
from hicache_storage_file.footprint import Footprint

from hicache_storage import HiCacheStorage, HiCacheStorageExtraInfo, HostKVPool, make_config, page_hashes
from hicache_storage.plugin.page_format import HEADER_SIZE

PAGE_SIZE = 4

pytestmark = pytest.mark.timeout(60)


def make_pool(num_pages: int = 32) -> HostKVPool:
    return HostKVPool(num_pages=num_pages, page_size=PAGE_SIZE, layer_num=1, head_num=1, head_dim=16)


#: Length of a storage key of these tests' key spaces (``hc1-<20>.<64 hex>.tp0of1.pp0of1.cp0of1``).
KEY_LENGTH = 110


def limit_for(root: Path, pool: HostKVPool, pages: int, spare_blocks: int = 0) -> int:
    """``max_bytes`` that holds ``pages`` page files on disk (blocks and directory entries), the root, and
    ``spare_blocks`` more for the root directory (it grows when hundreds of pages come and go)."""
    footprint = Footprint(str(root))
    page = footprint.page(HEADER_SIZE + pool.bytes_per_page) + footprint.entry(f"{root}/{'k' * KEY_LENGTH}")
    return (1 + spare_blocks) * footprint.directory + pages * page


def make_backend(root: Path, pool: HostKVPool, max_pages: int, spare_blocks: int = 0) -> HiCacheStorage:
    # Pages of a few hundred bytes: a 4 KiB key-space manifest would take the budget of 15 of them.
    root.mkdir(parents=True, exist_ok=True)
    extra = {
        "path": str(root),
        "resilience": False,
        "max_bytes": limit_for(root, pool, max_pages, spare_blocks),
        "io_threads": 4,
        "manifests": False,
    }
    backend = HiCacheStorage(FileBackend, make_config("m", extra_config=extra))
    backend.register_mem_pool_host(pool)
    return backend


def write(backend: HiCacheStorage, pool: HostKVPool, keys: list[str], prefix: list[str] | None = None) -> list[bool]:
    indices = pool.alloc(len(keys) * PAGE_SIZE)
    assert indices is not None
    try:
        info = HiCacheStorageExtraInfo(prefix_keys=prefix) if prefix else None
        return backend.batch_set_v1(keys, indices, info)
    finally:
        pool.free(indices)


def assert_prefixes(backend: HiCacheStorage, chains: list[list[str]]) -> list[int]:
    """Every chain's surviving pages are a prefix of it; returns the surviving lengths."""
    lengths = []
    for number, chain in enumerate(chains):
        present = backend.batch_exists_each(chain)
        length = backend.batch_exists(chain)
        assert not any(present[length:]), f"chain {number}: a page survives after a hole: {present}"
        lengths.append(length)
    return lengths


def on_disk_bytes(root: Path) -> int:
    """Allocated bytes of everything under ``root``, itself included (what ``du`` counts)."""
    return sum(p.lstat().st_blocks * 512 for p in [root, *root.rglob("*")])


def conversation(rng: random.Random, turns: int, pages_per_turn: int) -> list[list[int]]:
    """Token lists of each turn of one conversation (each turn extends the previous one)."""
    tokens: list[int] = []
    out = []
    for _ in range(turns):
        tokens = tokens + [rng.randrange(50000) for _ in range(pages_per_turn * PAGE_SIZE)]
        out.append(list(tokens))
    return out


def test_single_batch_chains_lose_tails_first(tmp_path: Path) -> None:
    pool = make_pool()
    backend = make_backend(tmp_path, pool, max_pages=40, spare_blocks=3)
    rng = random.Random(1)
    chains = []
    for _ in range(30):
        tokens = [rng.randrange(50000) for _ in range(rng.randrange(1, 13) * PAGE_SIZE)]
        chain = page_hashes(tokens, PAGE_SIZE)
        assert all(write(backend, pool, chain))
        chains.append(chain)
        assert_prefixes(backend, chains)
    lengths = assert_prefixes(backend, chains)
    assert sum(lengths) <= 43  # 40 pages, and the root directory's 3 spare blocks while it is small
    assert sum(lengths) > 0 and any(0 < n < len(c) for n, c in zip(lengths, chains, strict=True)), lengths
    assert lengths[-1] == len(chains[-1]), "the newest chain should survive whole"
    assert on_disk_bytes(tmp_path) <= limit_for(tmp_path, pool, 40, spare_blocks=3)
    assert backend.get_stats()["counters"]["evictions"] > 0


def test_multi_turn_chains_with_prefix_keys_never_leave_holes(tmp_path: Path) -> None:
    """Conversations written turn by turn (one batch per turn, linked by ``prefix_keys``), shared
    prefixes (branches), batches split at 8 pages, and head pages rewritten: no hole, ever."""
    pool = make_pool()
    backend = make_backend(tmp_path, pool, max_pages=48, spare_blocks=3)
    rng = random.Random(2)
    system = [rng.randrange(50000) for _ in range(2 * PAGE_SIZE)]  # a shared system prompt: 2 pages
    chains: list[list[str]] = []
    written: set[str] = set()
    for _ in range(25):
        turns = conversation(rng, rng.randrange(1, 4), rng.randrange(1, 5))
        for tokens in turns:
            chain = page_hashes(system + tokens, PAGE_SIZE)
            # the engine writes only the pages it has not written yet, in batches of <= 8 pages
            start = 0
            while start < len(chain) and chain[start] in written:
                start += 1
            if start == len(chain):  # rewrite the head, as an engine with a cold existence cache does
                start = 0
            for begin in range(start, len(chain), 8):
                batch = chain[begin : begin + 8]
                assert all(write(backend, pool, batch, prefix=chain[:begin]))
                written.update(batch)
            chains.append(chain)
            assert_prefixes(backend, chains)
    lengths = assert_prefixes(backend, chains)
    assert backend.get_stats()["counters"]["evictions"] > 0
    assert lengths[-1] == len(chains[-1])
    assert on_disk_bytes(tmp_path) <= limit_for(tmp_path, pool, 48, spare_blocks=3)


def test_write_order_policy_would_leave_holes() -> None:
    """The same kind of workload through the plain write-order policy does leave holes (so the
    prefix checks above can fail), and the chain policy does not."""
    rng = random.Random(3)
    for policy_type, expect_holes in ((WriteOrderEviction, True), (ChainEviction, False)):
        policy: Any = policy_type(10)
        alive: set[str] = set()
        chains = []
        for number in range(20):
            chain = [f"c{number}p{i}" for i in range(rng.randrange(2, 8))]
            for begin in range(0, len(chain), 3):  # multi-batch chains, linked through the parent
                batch = chain[begin : begin + 3]
                policy.record_batch([(p, 1) for p in batch], parent=chain[begin - 1] if begin else None)
                alive.update(batch)
                alive.difference_update(policy.victims())
            chains.append(chain)
        holes = sum(
            1 for chain in chains for i in range(1, len(chain)) if chain[i] in alive and chain[i - 1] not in alive
        )
        assert (holes > 0) == expect_holes, (policy_type.__name__, holes)
        assert policy.total_bytes <= 10


def test_chain_policy_unit_rules() -> None:
    policy = ChainEviction(3)
    policy.record_batch([("a", 1), ("b", 1), ("c", 1)])
    policy.record_batch([("d", 1)], parent="c")  # continues a-b-c
    assert policy.victims() == ["d"]  # over by one: the deepest leaf of the oldest chain part goes
    policy.record_batch([("x", 1), ("y", 1)])  # a new chain
    assert policy.victims() == ["c", "b"]  # oldest batch, from its tail
    policy.record_write("a", 1)  # a rewrite makes the head recent; it is still evicted last of its chain
    policy.record_batch([("z", 1)])
    assert policy.victims() == ["y"]
    assert policy.survivors() == {"a", "x", "z"}
    policy.record_removal("x")
    assert policy.total_bytes == 2
    policy.record_batch([("f", 1), ("g", None), ("h", 1)])  # a failed write in the middle
    assert policy.victims() == ["a"]  # h is not linked to f (g between them failed): both stay leaves
    policy.reset()
    assert policy.total_bytes == 0 and len(policy) == 0


def test_pages_found_on_disk_are_evicted_first(tmp_path: Path) -> None:
    pool = make_pool()
    old = make_backend(tmp_path, pool, max_pages=100)
    rng = random.Random(4)
    old_chain = page_hashes([rng.randrange(50000) for _ in range(6 * PAGE_SIZE)], PAGE_SIZE)
    assert all(write(old, pool, old_chain))
    old.close()
    backend = make_backend(tmp_path, pool, max_pages=8)
    new_chain = page_hashes([rng.randrange(50000) for _ in range(4 * PAGE_SIZE)], PAGE_SIZE)
    assert all(write(backend, pool, new_chain))
    assert backend.batch_exists_each(new_chain) == [True] * 4
    assert sum(backend.batch_exists_each(old_chain)) == 4  # pages found at start-up went first
