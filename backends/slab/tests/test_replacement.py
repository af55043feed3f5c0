"""Replacement through the SDK: least recently used over the whole store, chain tails first, reads and
chains that make pages recent, pinned deployments, regions lent between page sizes, quotas.

The store is 8 MiB: 11 regions of 512 KiB, so 22 slots of 256 KiB pages. Time is the ``clock``
fixture's: it moves 1 µs per reading unless a test moves it on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from slab_support import Clock, big_pool, chain, indices, make_backend, the_store

from hicache_storage import HiCacheStorage
from hicache_storage import testing as kit

SLOTS = 22  # 256 KiB pages in an 8 MiB store


def open_storage(root: Path, *, page_kib: int = 256, **options: Any) -> HiCacheStorage:
    storage = make_backend(root, big_pool(8, page_kib), **options)
    assert the_store(storage).geometry.regions * the_store(storage).geometry.region_bytes == SLOTS * (256 << 10)
    return storage


def write(storage: HiCacheStorage, keys: list[str], extra_info: Any = None) -> None:
    assert storage.batch_set_v1(keys, indices(0, len(keys)), extra_info) == [True] * len(keys)


def write_each(storage: HiCacheStorage, keys: list[str]) -> None:
    for key in keys:
        write(storage, [key])


def evictions(storage: HiCacheStorage) -> int:
    return int(storage.stats.get("evictions"))


def test_the_least_recent_page_of_the_whole_store_goes_first(tmp_path: Path, clock: Clock) -> None:
    first = open_storage(tmp_path, model="m1")
    second = open_storage(tmp_path, model="m2", namespace="tenant")  # another key space and group
    keys = kit.random_keys(SLOTS + 2)
    for number, key in enumerate(keys[:SLOTS]):
        write(first if number % 2 == 0 else second, [key])
    assert evictions(first) + evictions(second) == 0
    write(second, keys[SLOTS : SLOTS + 1])  # the least recent page is the first model's
    assert first.batch_exists_each(keys[:1]) == [False] and evictions(second) == 1
    write(first, keys[SLOTS + 1 :])  # ... and now the second model's
    assert second.batch_exists_each(keys[1:2]) == [False] and evictions(first) == 1
    assert first.batch_exists_each(keys[2:SLOTS:2] + keys[SLOTS + 1 :]) == [True] * 11
    assert second.batch_exists_each(keys[3:SLOTS:2] + keys[SLOTS : SLOTS + 1]) == [True] * 11
    first.close()
    second.close()


def test_a_batchs_later_pages_go_before_its_earlier_ones(tmp_path: Path, clock: Clock) -> None:
    storage = open_storage(tmp_path)
    batch, fillers, more = kit.random_keys(4), kit.random_keys(SLOTS - 4), kit.random_keys(4)
    write(storage, batch)
    write_each(storage, fillers)
    for number, key in enumerate(more, start=1):
        write(storage, [key])
        assert storage.batch_exists_each(batch) == [True] * (4 - number) + [False] * number  # the tail first
    assert storage.batch_exists_each(fillers) == [True] * len(fillers)
    storage.close()


@pytest.mark.parametrize(
    ("recency", "wait_s", "read_is_recent"),
    [(0.0, 0.0, True), (None, 5.0, False), (1.0, 0.0, False), (1.0, 2.0, True)],
)
def test_a_read_makes_a_page_recent_when_it_was_not_for_read_recency_s(
    tmp_path: Path, clock: Clock, recency: float | None, wait_s: float, read_is_recent: bool
) -> None:
    storage = open_storage(tmp_path, read_recency_s=recency)
    keys = kit.random_keys(SLOTS + 1)
    write_each(storage, keys[:SLOTS])
    clock.advance(wait_s)
    assert storage.batch_get_v1(keys[:1], indices(4, 1)) == [True]
    write(storage, keys[SLOTS:])
    expected = [True, False] if read_is_recent else [False, True]
    assert storage.batch_exists_each(keys[:2]) == expected
    storage.close()


@pytest.mark.parametrize("named", [True, False])
def test_a_continuation_is_never_more_recent_than_the_page_it_continues(
    tmp_path: Path, clock: Clock, named: bool
) -> None:
    """With the parent named (``prefix_keys``), a batch that continues a chain is placed just below the
    page it continues: it goes before it, and before every later page. Unnamed, the continuation is
    the newest page and the chain's own pages go first (tails first), leaving it unreachable."""
    storage = open_storage(tmp_path)
    head, fillers, newer = kit.random_keys(3), kit.random_keys(SLOTS - 3), kit.random_keys(3)
    write(storage, head[:2])
    write_each(storage, fillers)
    write(storage, head[2:], chain(head[:2]) if named else None)
    if named:  # evicted: the continuation, then the page it continues, then the first
        expected = [[True, True, False], [True, False, False], [False, False, False]]
    else:  # evicted: the chain's second page, then its first; the continuation stays, unreachable
        expected = [[True, False, True], [False, False, True], [False, False, True]]
    for key, present in zip(newer, expected, strict=True):
        write(storage, [key])
        assert storage.batch_exists_each(head) == present
    storage.close()


def test_a_read_makes_only_the_pages_it_reads_recent(tmp_path: Path, clock: Clock) -> None:
    """The chain a read names is not made recent: only the pages read are (the earlier pages were
    served from a faster tier, or read in an earlier call that made them recent then)."""
    storage = open_storage(tmp_path)
    keys = kit.random_keys(SLOTS + 1)
    write_each(storage, keys[:SLOTS])
    assert storage.batch_get_v1(keys[1:2], indices(4, 1), chain(keys[:1])) == [True]
    write(storage, keys[SLOTS:])
    assert storage.batch_exists_each(keys[:3]) == [False, True, True]  # the read page stayed, not its parent
    storage.close()


def test_a_pinned_deployment_loses_pages_only_when_its_size_has_no_other(tmp_path: Path, clock: Clock) -> None:
    pinned = open_storage(tmp_path, model="pinned", pinned=True)
    plain = open_storage(tmp_path, model="plain")
    kept, churn = kit.random_keys(10), kit.random_keys(30)
    write_each(pinned, kept)  # the least recent pages of all
    write_each(plain, churn)
    assert pinned.batch_exists_each(kept) == [True] * 10
    assert plain.batch_exists_each(churn) == [False] * 18 + [True] * 12
    more = kit.random_keys(13)
    write_each(pinned, more[:12])  # room from the other deployment's pages
    assert not any(plain.batch_exists_each(churn)) and pinned.batch_exists_each(kept) == [True] * 10
    write(pinned, more[12:])  # only pinned pages are left: its own least recent goes
    assert pinned.batch_exists_each(kept[:2]) == [False, True]
    assert pinned.batch_exists_each(more) == [True] * 13
    pinned.close()
    plain.close()


def test_a_second_page_size_takes_a_region_of_much_older_pages(tmp_path: Path, clock: Clock) -> None:
    large = open_storage(tmp_path, model="large")
    small = open_storage(tmp_path, model="small", page_kib=128)  # 4 to a region
    old = kit.random_keys(SLOTS)
    write_each(large, old)
    clock.advance(10)
    fresh = kit.random_keys(9)
    write(small, fresh[:1])  # no page of its own: the region of the least recent page (2 pages) is taken
    assert large.batch_exists_each(old[:3]) == [False, False, True] and evictions(small) == 2
    write_each(small, fresh[1:4])  # the rest of that region
    assert evictions(small) == 2
    write(small, fresh[4:5])  # its own least recent is 0 s old, the other size's 10 s: another region
    assert large.batch_exists_each(old[:5]) == [False] * 4 + [True] and evictions(small) == 4
    write_each(small, fresh[5:8])
    clock.advance(100)  # now the other size's least recent page is not much older than its own
    write(small, fresh[8:])
    assert small.batch_exists_each(fresh) == [False] + [True] * 8
    assert large.batch_exists_each(old[4:]) == [True] * (SLOTS - 4) and evictions(small) == 5
    large.close()
    small.close()


def test_a_region_left_empty_goes_back_to_spare(tmp_path: Path, clock: Clock) -> None:
    large = open_storage(tmp_path, model="large")
    small = open_storage(tmp_path, model="small", page_kib=128)
    old = kit.random_keys(SLOTS)
    write_each(large, old)
    clock.advance(10)
    fresh = kit.random_keys(2)
    write(small, fresh)  # takes the region of the two least recent pages
    assert evictions(small) == 2
    assert small.delete(fresh) == [True, True]  # its region holds no page now: spare again
    write(large, kit.random_keys(2))
    assert evictions(large) == 0 and large.batch_exists_each(old[2:]) == [True] * (SLOTS - 2)
    large.close()
    small.close()


def test_a_namespace_over_its_quota_replaces_its_own_pages(tmp_path: Path, clock: Clock) -> None:
    other = open_storage(tmp_path, model="other", namespace="other")
    quota = open_storage(tmp_path, model="q", namespace="q", quota_bytes=4 * (256 << 10))
    older, mine = kit.random_keys(4), kit.random_keys(8)
    write_each(other, older)  # less recent than any of the quota's pages
    write_each(quota, mine)
    assert quota.batch_exists_each(mine) == [False] * 4 + [True] * 4
    assert other.batch_exists_each(older) == [True] * 4 and evictions(quota) == 4
    assert the_store(quota).opened.index.group_usage() == {"other": 4 << 18, "q": 4 << 18}
    other.close()
    quota.close()
