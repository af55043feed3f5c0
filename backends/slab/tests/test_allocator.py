"""Slots and replacement inside one write transaction (:class:`WriteTxn`), on an index of 4 regions of 64 KiB.

Pages are staged and committed through the index with a chosen age, so the replacement order is
set by the test, not by the clock.
"""

from __future__ import annotations

from hicache_storage_slab.allocator import CLAIM_TTL_NS, STEAL_FACTOR
from hicache_storage_slab.index import SlabIndex, Written
from hicache_storage_slab.records import NO_REGION, PINNED, Claim, Entry, SizeClass, key_digest, slot_ref, unpack
from slab_support import count, put_page, region_of, spare_regions, stored, write_txn

KIB = 1024
A, B = 16 * KIB, 32 * KIB  # chunk sizes: 4 and 2 slots per region


def fill(
    index: SlabIndex, chunk: int, count_: int, *, first_age_s: float = 100.0, name: str = "a", **kwargs: object
) -> list[str]:
    """Pages ``name0`` .. of ``chunk`` bytes, page ``i`` made recent ``first_age_s - i`` seconds ago."""
    names = [f"{name}{i}" for i in range(count_)]
    for i, page in enumerate(names):
        assert put_page(index, page, chunk, age_s=first_age_s - i, **kwargs)[0]  # type: ignore[arg-type]
    return names


# ----------------------------------------------------------------------------- handing out slots
def test_a_size_is_lent_a_spare_region_and_fills_it_in_order(small_index: SlabIndex) -> None:
    assert spare_regions(small_index) == [0, 1, 2, 3]
    with write_txn(small_index) as txn:
        refs = txn.take(A, 5)
    assert refs == [slot_ref(0, 0), slot_ref(0, 1), slot_ref(0, 2), slot_ref(0, 3), slot_ref(1, 0)]
    assert spare_regions(small_index) == [2, 3]
    assert region_of(small_index, 0) == (A, 4, 4) and region_of(small_index, 1) == (A, 1, 1)
    with small_index.env.begin(db=small_index.db.sizes) as raw:
        record = raw.get(A.to_bytes(4, "big"))
    assert record is not None and unpack(SizeClass, record) == SizeClass(2, 1)  # 2 regions, filling region 1


def test_a_slot_given_back_is_handed_out_first(small_index: SlabIndex) -> None:
    with write_txn(small_index) as txn:
        refs = txn.take(A, 3)
        assert refs is not None
        txn.give_back(refs[1], A)
    assert count(small_index, "free") == 1 and region_of(small_index, 0) == (A, 3, 2)
    with write_txn(small_index) as txn:
        assert txn.take(A, 2) == [refs[1], slot_ref(0, 3)]
    assert count(small_index, "free") == 0


def test_a_region_left_without_a_live_slot_goes_back_to_spare(small_index: SlabIndex) -> None:
    with write_txn(small_index) as txn:
        refs = txn.take(B, 3)  # region 0 full, region 1 half
        assert refs is not None
    with write_txn(small_index) as txn:
        txn.give_back(refs[0], B)
    assert count(small_index, "free") == 1 and spare_regions(small_index) == [2, 3]
    with write_txn(small_index) as txn:
        txn.give_back(refs[1], B)  # region 0 empty: spare again, its given-back slots dropped
        txn.give_back(refs[2], B)  # region 1 too
    assert spare_regions(small_index) == [0, 1, 2, 3]
    assert count(small_index, "free") == 0 and count(small_index, "regions") == 0 and count(small_index, "sizes") == 0
    with write_txn(small_index) as txn:
        assert txn.take(A, 1) == [slot_ref(0, 0)]  # lent to another size now


def test_a_take_that_cannot_be_met_takes_nothing(small_index: SlabIndex) -> None:
    fill(small_index, A, 16, tier=PINNED)  # every slot held by pinned pages of A
    with write_txn(small_index) as txn:
        assert txn.take(B, 1) is None  # pinned regions are never taken by another size
    assert stored(small_index, [f"a{i}" for i in range(16)]) == [True] * 16


# ----------------------------------------------------------------------------- replacement
def test_the_least_recent_page_of_the_size_is_evicted(small_index: SlabIndex) -> None:
    names = fill(small_index, A, 16)
    assert count(small_index, "spare") == 0
    assert put_page(small_index, "new", A, age_s=0) == (True, 1)
    assert stored(small_index, names) == [False] + [True] * 15
    assert put_page(small_index, "newer", A, age_s=0) == (True, 1)
    assert stored(small_index, names[:3]) == [False, False, True]


def test_pinned_pages_go_only_when_their_size_has_no_other_page(small_index: SlabIndex) -> None:
    pinned = fill(small_index, A, 12, tier=PINNED)  # the least recent pages are pinned
    plain = fill(small_index, A, 4, first_age_s=10, name="plain")
    assert put_page(small_index, "n0", A, age_s=0) == (True, 1)
    assert stored(small_index, plain) == [False, True, True, True] and all(stored(small_index, pinned))
    for i in range(1, 4):
        assert put_page(small_index, f"n{i}", A, age_s=0, tier=PINNED) == (True, 1)
    assert not any(stored(small_index, plain)) and stored(small_index, ["n0"]) == [True]
    assert put_page(small_index, "n4", A, age_s=0, tier=PINNED) == (True, 1)
    assert stored(small_index, ["n0"]) == [False]  # the last unpinned page, newer than every pinned one
    assert all(stored(small_index, pinned))
    assert put_page(small_index, "n5", A, age_s=0, tier=PINNED) == (True, 1)  # only pinned pages are left
    assert stored(small_index, pinned[:2]) == [False, True]


def test_a_size_without_pages_takes_the_region_of_the_least_recent_page(small_index: SlabIndex) -> None:
    names = fill(small_index, A, 16)  # regions 0..3 hold pages 0-3, 4-7, 8-11, 12-15
    assert put_page(small_index, "b0", B, age_s=0) == (True, 4)  # region 0's four pages go at once
    assert stored(small_index, names) == [False] * 4 + [True] * 12
    assert region_of(small_index, 0) == (B, 1, 1)
    assert put_page(small_index, "b1", B, age_s=0) == (True, 0)  # the region's second slot


def test_another_sizes_region_is_taken_only_when_its_page_is_much_older(small_index: SlabIndex) -> None:
    names = fill(small_index, A, 16)  # ages 100 .. 85 s
    assert put_page(small_index, "b0", B, age_s=60) == (True, 4)  # B has no page: region 0 (pages 0-3) is taken
    assert put_page(small_index, "b1", B, age_s=50) == (True, 0)
    # B's least recent page is 60 s old, A's 96 s: not STEAL_FACTOR times older, so B replaces its own.
    assert STEAL_FACTOR * 60 > 96
    assert put_page(small_index, "b2", B, age_s=0) == (True, 1)
    assert stored(small_index, ["b0", "b1", "b2"]) == [False, True, True] and all(stored(small_index, names[4:]))
    small_index.delete([key_digest(b"b1")])
    assert put_page(small_index, "b3", B, age_s=1) == (True, 0)
    # B's least recent page is now 1 s old: A's (96 s) is much older, and its region goes to B.
    assert put_page(small_index, "b4", B, age_s=0) == (True, 4)
    assert stored(small_index, names[4:9]) == [False] * 4 + [True]
    assert stored(small_index, ["b2", "b3", "b4"]) == [True] * 3
    assert region_of(small_index, 1) == (B, 1, 1)


def test_a_region_with_a_write_in_flight_is_not_taken(small_index: SlabIndex) -> None:
    (claimed,), _outcome = small_index.stage([(key_digest(b"flying"), A, 1)], "", quota=None, sweep=False)
    assert claimed is not None and claimed.refs == [slot_ref(0, 0)]
    names = fill(small_index, A, 15)  # the least recent page shares region 0 with the claim
    with write_txn(small_index) as txn:
        assert txn.take(B, 1) is None  # no room now (the claim is short-lived), and nothing evicted
    assert all(stored(small_index, names))
    entry = Entry(0, 0, A, A, 1, 0, 0, tuple(claimed.refs), b"", b"flying")
    assert small_index.commit([Written(claimed, entry)], "").results == [True]
    assert put_page(small_index, "b0", B, age_s=0) == (True, 4)  # region 0 now: the claim's page went with it
    assert stored(small_index, ["flying", *names[:3]]) == [False] * 4


# ----------------------------------------------------------------------------- claims of writers that died
def test_claims_older_than_the_ttl_are_taken_back(small_index: SlabIndex) -> None:
    (staged,), _outcome = small_index.stage([(key_digest(b"lost"), B, 2)], "", quota=None, sweep=False)
    assert staged is not None and count(small_index, "claims") == 2
    claimed_ns = staged.claim.claimed_ns
    with write_txn(small_index, now=claimed_ns + CLAIM_TTL_NS) as txn:
        assert txn.sweep_claims() == 0  # not older than the TTL yet
    with write_txn(small_index, now=claimed_ns + CLAIM_TTL_NS + 1) as txn:
        assert txn.sweep_claims() == 2
    assert count(small_index, "claims") == 0 and spare_regions(small_index) == [0, 1, 2, 3]
    entry = Entry(0, 0, B, 2 * B, 1, 0, 0, tuple(staged.refs), b"", b"lost")
    assert small_index.commit([Written(staged, entry)], "").results == [False]  # its writer was taken for dead
    assert stored(small_index, ["lost"]) == [False]


def test_a_sweep_takes_back_the_claims_it_is_told_to(small_index: SlabIndex) -> None:
    requests = [(key_digest(name), A, 1) for name in (b"x", b"y")]
    staged, _outcome = small_index.stage(requests, "", quota=None, sweep=False)
    doomed = staged[0]
    assert doomed is not None and staged[1] is not None
    with write_txn(small_index) as txn:
        assert txn.sweep_claims(lambda claim: claim == doomed.claim) == 1
    assert count(small_index, "claims") == 1 and count(small_index, "free") == 1
    assert isinstance(staged[1].claim, Claim) and staged[1].claim.writer != doomed.claim.writer


def test_size_classes_track_the_region_being_filled(small_index: SlabIndex) -> None:
    with write_txn(small_index) as txn:
        assert txn.size_class(A).filling == NO_REGION and txn.chunk_sizes() == []
        txn.take(A, 1)
        txn.take(B, 1)
        assert txn.size_class(B).filling == 1
    with write_txn(small_index) as txn:
        assert txn.chunk_sizes() == [A, B]
