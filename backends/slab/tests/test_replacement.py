"""Replacement within a set: the vectorised scan of a set's headers, and reads that make a page recent."""

from __future__ import annotations

from pathlib import Path

import pytest
from hicache_storage_slab import SlabOptions
from hicache_storage_slab.layout import COMMITTED, ENTRY_SIZE, WRITING, encode_entry, key_digest
from hicache_storage_slab.set_scan import DecodedSet, SetScan, scan_set
from slab_support import indices, keys_in_one_set, kv_slab, make_backend, make_pool

from hicache_storage import ConfigError, HiCacheStorage
from hicache_storage import testing as kit


def _header(state: int, seq: int, name: str) -> bytes:
    return encode_entry(state, 4096, seq, key_digest(name), checksum=seq, writer=1, key=name.encode())


@pytest.mark.parametrize("reader", [SetScan, DecodedSet])
def test_the_scan_prefers_a_blank_slot_then_the_least_recent_other_key(reader: type[SetScan | DecodedSet]) -> None:
    digest = key_digest("mine")
    raw = _header(COMMITTED, 30, "a") + _header(COMMITTED, 10, "mine") + bytes(ENTRY_SIZE) + _header(WRITING, 20, "b")
    scan = reader(raw, 4)
    assert scan.victim(digest, frozenset()) == 2  # blank
    assert scan.victim(digest, {2}) == 3  # least recent of the other keys (a claim left by a dead writer)
    assert scan.victim(digest, {2, 3}) == 0  # never this key's own copy while another key's slot is free
    assert scan.victim(digest, {0, 2, 3}) == 1 and scan.victim(digest, {0, 1, 2, 3}) is None
    assert [way for way, _entry in scan.copies(digest)] == [1] and scan.max_seq() == 30
    assert scan.holds_other(0, digest) and not scan.holds_other(1, digest) and not scan.holds_other(2, digest)
    damaged = bytearray(raw)
    damaged[ENTRY_SIZE + 20] ^= 1  # the copy's header fails its check: no longer a copy
    assert reader(bytes(damaged), 4).copies(digest) == []
    assert isinstance(scan_set(raw, 4), DecodedSet) and isinstance(scan_set(raw * 16, 64), SetScan)


@pytest.mark.parametrize(("recency", "survivor"), [(0.0, 0), (None, 1)])
def test_a_read_makes_a_page_recent_unless_reads_never_write(
    tmp_path: Path, recency: float | None, survivor: int
) -> None:
    backend = make_backend(tmp_path, make_pool(), capacity_bytes=64 * 1024, ways=4, read_recency_s=recency)
    keys = keys_in_one_set(backend, 5)
    for slot, key in enumerate(keys[:4]):
        assert backend.batch_set_v1([key], indices(slot, 1)) == [True]
    assert backend.batch_get_v1([keys[0]], indices(8, 1)) == [True]  # the oldest write, read again
    assert backend.batch_set_v1([keys[4]], indices(4, 1)) == [True]  # the set is full: one page goes
    evicted = 1 - survivor
    assert backend.batch_exists_each(keys[:2]) == [evicted != 0, evicted != 1]
    assert backend.stats.get("read_touches") == (1 if recency is not None else 0)
    backend.close()


def test_read_recency_must_be_seconds_or_null() -> None:
    with pytest.raises(ConfigError) as caught:
        SlabOptions(read_recency_s=-1)
    assert caught.value.option == "extra_config.read_recency_s"
    assert SlabOptions(read_recency_s=None).read_recency_s is None and SlabOptions().ways == 64


def test_a_read_between_a_rewrites_staging_and_commit_does_not_keep_the_old_copy(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, make_pool(), read_recency_s=0.0)
    slab = kv_slab(backend)
    (key,) = backend.pool_keyspace().storage_keys(kit.random_keys(1))
    size = slab.geometry.page_bytes
    old, new, out = bytearray(b"o" * size), bytearray(b"n" * size), bytearray(size)
    plan = slab.stage(key, [memoryview(old)])
    assert plan is not None and slab.commit(plan)
    plan = slab.stage(key, [memoryview(new)])  # new bytes: another slot, the old copy still readable
    assert plan is not None
    assert slab.read(key, [memoryview(out)]) and out == old  # ... and made recent by this read
    assert backend.stats.get("read_touches") == 1
    assert slab.commit(plan)
    assert slab.read(key, [memoryview(out)]) and out == new
    digest = key_digest(key)
    copies = [e for e in slab.committed() if e.digest == digest]
    assert len(copies) == 1
    backend.close()


def _spread_keys(backend: HiCacheStorage, count: int) -> list[str]:
    """``count`` bare keys whose first set is set 0 and whose second choice is another set."""
    space, slab = backend.pool_keyspace(), kv_slab(backend)
    found = []
    for key in kit.random_keys(200 * count):
        sets = slab.sets_of(space.storage_key(key))
        if len(sets) == 2 and sets[0] == (0, 0):
            found.append(key)
            if len(found) == count:
                return found
    raise AssertionError("not enough keys")


TWO_SETS = {"capacity_bytes": 80 * 1024, "ways": 8}  # two sets of 8 slots of 4 KiB


@pytest.mark.parametrize(("choices", "evictions"), [(1, 8), (2, 0)])
def test_two_choices_put_a_key_in_the_set_with_room(tmp_path: Path, choices: int, evictions: int) -> None:
    backend = make_backend(tmp_path, make_pool(), choices=choices, **TWO_SETS)
    assert kv_slab(backend).geometry.sets == 2
    keys = _spread_keys(backend, 16) if choices == 2 else keys_in_one_set(backend, 16)  # all first in set 0
    for number in range(0, 16, 8):
        assert backend.batch_set_v1(keys[number : number + 8], indices(0, 8)) == [True] * 8
    assert backend.stats.get("evictions") == evictions
    assert sum(backend.batch_exists_each(keys)) == 16 - evictions
    backend.close()


def test_with_two_choices_a_rewrite_leaves_one_copy_and_reads_the_newest(tmp_path: Path) -> None:
    backend = make_backend(tmp_path, make_pool(), choices=2, **TWO_SETS)
    slab = kv_slab(backend)
    keys = _spread_keys(backend, 6)
    stored = backend.pool_keyspace().storage_keys(keys)
    size = slab.geometry.page_bytes
    for number, key in enumerate(stored):
        assert slab.commit(slab.stage(key, [memoryview(bytearray([number]) * size)]))  # type: ignore[arg-type]
    out = bytearray(size)
    for number, key in enumerate(stored):  # new bytes for each: rewritten where its copy is
        assert slab.commit(slab.stage(key, [memoryview(bytearray([100 + number]) * size)]))  # type: ignore[arg-type]
        assert slab.read(key, [memoryview(out)]) and out == bytearray([100 + number]) * size
    digests = [key_digest(key) for key in stored]
    assert sorted(e.digest for e in slab.committed()) == sorted(digests)  # one copy each, in either set
    slab.delete(stored[0])
    assert not slab.exists(stored[0]) and all(slab.exists(key) for key in stored[1:])
    backend.close()


def test_choices_must_be_one_or_two() -> None:
    with pytest.raises(ConfigError) as caught:
        SlabOptions(choices=3)
    assert caught.value.option == "extra_config.choices" and SlabOptions().choices == 2
