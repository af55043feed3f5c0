"""The slab index on its own: one environment per file and process, staging and committing, touches,
removal, pinning, quotas, the page limit, and running out of index room."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest
from hicache_storage_slab import index as index_module
from hicache_storage_slab.allocator import WriteTxn
from hicache_storage_slab.index import SlabIndex, Touch, Written, open_index
from hicache_storage_slab.records import PINNED, Entry, key_digest
from slab_support import count, put_page, small_geometry, spare_regions, stored

KIB = 1024
A = 16 * KIB


def digests(*names: str) -> list[bytes]:
    return [key_digest(name.encode()) for name in names]


def test_one_environment_per_file_and_process_closed_with_its_last_user(tmp_path: Path) -> None:
    path = str(tmp_path / "slab.index")
    first = open_index(path, small_geometry())
    first.reset(b"i" * 16)
    second = open_index(path, small_geometry())
    assert second is first  # LMDB allows one environment per file and process
    assert put_page(first, "p", A, age_s=0)[0]
    first.close()
    assert second.contains(digests("p")) == [True] and second.store_id() == b"i" * 16  # still open
    second.close()
    with pytest.raises(lmdb.Error):
        second.page_count()
    third = open_index(path, small_geometry())  # a fresh environment sees what was committed
    assert third is not first and third.contains(digests("p")) == [True]
    third.close()


def test_a_committed_page_is_found_with_its_group_and_replaces_an_older_copy(small_index: SlabIndex) -> None:
    assert small_index.lookup(digests("k")) == [None]
    assert put_page(small_index, "k", A, age_s=5, namespace="tenant")[0]
    (entry,) = small_index.lookup(digests("k"))
    assert entry is not None and entry.key == b"k" and entry.length == A and entry.group == 0
    assert small_index.group_usage() == {"tenant": A}
    assert put_page(small_index, "k", A, age_s=0, namespace="tenant")[0]  # a rewrite: new slot, old one back
    (again,) = small_index.lookup(digests("k"))
    assert again is not None and again.refs != entry.refs and again.seq > entry.seq
    assert small_index.page_count() == 1 and count(small_index, "free") == 1
    assert small_index.group_usage() == {"tenant": A}
    assert put_page(small_index, "other", A, age_s=0, namespace="")[0]
    assert small_index.group_usage() == {"tenant": A, "": A}
    listed = list(small_index.entries(None))
    assert [digest for digest, _entry in listed] == sorted(digests("k", "other"))
    assert [digest for digest, _entry in small_index.entries(listed[0][0])] == [listed[1][0]]


def test_a_failed_write_publishes_nothing_and_gives_its_slots_back(small_index: SlabIndex) -> None:
    staged, outcome = small_index.stage([(key_digest(b"f"), A, 2)], "", quota=None, sweep=False)
    assert staged[0] is not None and outcome.evicted == 0 and small_index.claim_count() == 2
    assert small_index.commit([Written(staged[0], None)], "").results == [False]
    assert small_index.claim_count() == 0 and small_index.page_count() == 0
    assert spare_regions(small_index) == [0, 1, 2, 3]


def test_a_touch_applies_only_to_the_copy_that_was_read(small_index: SlabIndex) -> None:
    assert put_page(small_index, "t", A, age_s=10)[0]
    (entry,) = small_index.lookup(digests("t"))
    assert entry is not None
    small_index.touch([Touch(key_digest(b"t"), entry.seq - 1, entry.seq + 5)])  # another copy was read
    small_index.touch([Touch(key_digest(b"t"), entry.seq, entry.seq - 5)])  # not more recent
    assert small_index.lookup(digests("t")) == [entry]
    small_index.touch([Touch(key_digest(b"t"), entry.seq, entry.seq + 5), Touch(key_digest(b"gone"), 0, 1)])
    (touched,) = small_index.lookup(digests("t"))
    assert touched is not None and touched.seq == entry.seq + 5 and count(small_index, "recency") == 1


def test_delete_clear_and_pinning(small_index: SlabIndex) -> None:
    for name in ("hc1-a.1", "hc1-a.2", "hc1-b.1", "hc1-c.1"):
        assert put_page(small_index, name, A, age_s=0)[0]
    assert small_index.delete(digests("hc1-a.1", "absent")) == 1
    assert small_index.clear([b"hc1-a.", b"hc1-b."]) == 2
    assert stored(small_index, ["hc1-a.2", "hc1-b.1", "hc1-c.1"]) == [False, False, True]
    small_index.set_pinned(digests("hc1-c.1", "absent"), True)
    (entry,) = small_index.lookup(digests("hc1-c.1"))
    assert entry is not None and entry.tier == PINNED and count(small_index, "recency") == 1
    small_index.set_pinned(digests("hc1-c.1"), False)
    assert small_index.lookup(digests("hc1-c.1"))[0] == entry._replace(tier=0)
    small_index.reset(b"n" * 16)
    assert small_index.page_count() == 0 and small_index.store_id() == b"n" * 16
    assert spare_regions(small_index) == [0, 1, 2, 3]


def test_drop_own_claims_gives_back_what_this_instance_staged(small_index: SlabIndex) -> None:
    small_index.stage([(key_digest(b"x"), A, 1), (key_digest(b"y"), A, 3)], "", quota=None, sweep=False)
    assert small_index.claim_count() == 4
    assert small_index.drop_own_claims() == 4
    assert small_index.claim_count() == 0 and spare_regions(small_index) == [0, 1, 2, 3]


def test_a_namespace_over_its_quota_replaces_its_own_pages(small_index: SlabIndex) -> None:
    assert put_page(small_index, "other", A, age_s=100, namespace="b")[0]
    for i in range(3):
        assert put_page(small_index, f"q{i}", A, age_s=50 - i, namespace="q", quota=2 * A)[0]
    assert stored(small_index, ["other", "q0", "q1", "q2"]) == [True, False, True, True]
    assert small_index.group_usage() == {"b": A, "q": 2 * A}


def test_the_index_holds_at_most_max_pages(small_index: SlabIndex) -> None:
    limit = small_index.geometry.max_pages
    names = [f"p{i}" for i in range(limit + 2)]
    for i, name in enumerate(names):
        assert put_page(small_index, name, 512, age_s=1000 - i)[0]  # 128 slots per region: room for more
    assert small_index.page_count() == limit
    assert stored(small_index, names[:3]) == [False, False, True]


def test_an_index_out_of_room_evicts_an_eighth_then_resets(
    small_index: SlabIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [f"p{i}" for i in range(16)]
    for i, name in enumerate(names):
        assert put_page(small_index, name, A, age_s=100 - i)[0]
    runs: list[int] = []

    def full_once(_txn: WriteTxn) -> None:
        runs.append(1)
        if len(runs) == 1:
            raise lmdb.MapFullError("full")

    small_index._write(full_once)
    assert len(runs) == 2 and small_index.room_faults == 1
    assert stored(small_index, names) == [False] * 8 + [True] * 8  # max_pages // 8 least recent pages

    def full(_txn: Any, _count: int) -> None:
        raise lmdb.MapFullError("full")

    monkeypatch.setattr(index_module, "_evict_oldest", full)
    runs.clear()
    small_index._write(full_once)  # the eviction does not fit either: the index is emptied
    assert small_index.room_faults == 3 and small_index.page_count() == 0
    assert small_index.store_id() == b"s" * 16 and spare_regions(small_index) == [0, 1, 2, 3]


def test_entries_keep_the_tier_they_are_committed_with(small_index: SlabIndex) -> None:
    staged, _outcome = small_index.stage([(key_digest(b"p"), A, 1)], "", quota=None, sweep=False)
    assert staged[0] is not None
    entry = Entry(PINNED, 9, A, A, 1, 2, 3, tuple(staged[0].refs), b"", b"p")
    assert small_index.commit([Written(staged[0], entry)], "").results == [True]
    assert small_index.lookup(digests("p")) == [entry._replace(group=0)]  # the group is the namespace's
