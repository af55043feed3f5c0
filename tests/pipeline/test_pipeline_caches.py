"""StorageExistenceCache and BufferPageCache."""

from __future__ import annotations

import pytest

from hicache_storage.pipeline import BufferPageCache, StorageExistenceCache


def test_existence_cache_is_a_bounded_lru_per_pool() -> None:
    cache = StorageExistenceCache(capacity=3)
    cache.record("kv", ["a", "b", "c"])
    assert not cache.covers_all("mamba", ["a"])
    assert cache.contains("kv", "a")  # refreshes "a": "b" is now the oldest
    cache.record("kv", ["d"])
    assert not cache.contains("kv", "b") and cache.contains("kv", "a") and len(cache) == 3
    assert cache.evictions == 1
    assert cache.covers_all("kv", ["a", "c", "d"])
    assert cache.covers_all("kv", ["a", "x"], extra_cover={"x"})
    assert not cache.covers_all("kv", ["a", "y"], extra_cover={"x"})
    assert cache.invalidate_beyond("kv", ["a", "c", "zz"], 1) == 1
    assert cache.contains("kv", "a") and not cache.contains("kv", "c")
    with pytest.raises(ValueError):
        StorageExistenceCache(0)


def test_main_pool_and_sidecar_beliefs_share_one_recency_order() -> None:
    cache = StorageExistenceCache(capacity=3, main_pool="kv")
    cache.record("kv", ["a"])
    cache.record("mamba", ["a"])
    cache.record("kv", ["b"])
    assert cache.holds("mamba", "a") and not cache.holds("mamba", "b") and not cache.holds("swa", "a")
    assert cache.contains("kv", "a")  # the oldest is now mamba's "a"
    cache.record("swa", ["a"])
    assert not cache.holds("mamba", "a") and cache.holds("kv", "a") and cache.holds("swa", "a")
    assert cache.invalidate_beyond("swa", ["a"], 0) == 1 and cache.holds("kv", "a") and len(cache) == 2


def test_buffer_page_cache_reference_counts_and_lru_reclaim() -> None:
    cache = BufferPageCache()
    assert cache.insert("a", 10) and cache.insert("b", 11) and cache.insert("c", 12)
    assert not cache.insert("a", 13)
    assert cache.acquire("a") == 10 and cache.acquire("a") == 10 and cache.acquire("zz") is None
    assert cache.refcount("a") == 2 and cache.reclaimable == 2
    assert cache.reclaim(5) == [11, 12]  # referenced pages are never reclaimed
    cache.release("a")
    assert cache.reclaimable == 0
    cache.release("a")
    assert cache.reclaimable == 1
    with pytest.raises(ValueError):
        cache.release("a")
    assert cache.reclaim(1) == [10] and len(cache) == 0 and "a" not in cache
