"""The index's records: entries, recency keys (the replacement order), slot references, claims, regions."""

from __future__ import annotations

import pytest
from hicache_storage_slab.records import (
    ENTRY,
    NO_REGION,
    PINNED,
    Claim,
    Entry,
    Region,
    SizeClass,
    checksum_seed,
    decode_entry,
    encode_entry,
    key_digest,
    one_chunk,
    pack,
    recency_key,
    recency_prefix,
    recency_seq,
    slot_ref,
    split_ref,
    unpack,
    with_seq,
)
from hypothesis import given, settings
from hypothesis import strategies as st

U8, U16, U32, U64 = (st.integers(0, (1 << bits) - 1) for bits in (8, 16, 32, 64))

entries = st.builds(
    Entry,
    tier=U8,
    group=U16,
    chunk_bytes=U32,
    length=U64,
    seq=U64,
    checksum=U64,
    written_ns=U64,
    refs=st.lists(U64, min_size=1, max_size=70).map(tuple),
    auth=st.binary(max_size=80),
    key=st.binary(max_size=300),
)


@settings(max_examples=100, deadline=None)
@given(entries)
def test_an_entry_round_trips(entry: Entry) -> None:
    raw = encode_entry(entry)
    assert decode_entry(raw) == entry
    assert entry.stored_bytes == len(entry.refs) * entry.chunk_bytes


@settings(max_examples=100, deadline=None)
@given(entries, st.binary(max_size=300))
def test_one_chunk_reads_exactly_the_one_chunk_entries_of_the_key(entry: Entry, other: bytes) -> None:
    raw = encode_entry(entry)
    found = one_chunk(raw, entry.key)
    if len(entry.refs) == 1 and not entry.auth:
        assert found == (entry.refs[0], entry.chunk_bytes, entry.length, entry.seq, entry.checksum)
    else:  # chunked or authenticated: the caller decodes the whole entry
        assert found is None
    if other != entry.key:
        assert one_chunk(raw, other) is None


def test_one_chunk_refuses_another_version_and_a_key_that_only_ends_alike() -> None:
    raw = encode_entry(Entry(0, 3, 4096, 4000, 5, 6, 7, (9,), b"", b"hc1-page-key"))
    assert one_chunk(raw, b"hc1-page-key") == (9, 4096, 4000, 5, 6)
    assert one_chunk(raw, b"page-key") is None  # a suffix of the stored key
    assert one_chunk(bytes([2]) + raw[1:], b"hc1-page-key") is None


def test_a_short_record_or_another_version_is_refused() -> None:
    entry = Entry(0, 3, 4096, 4000, 5, 6, 7, (1, 2), b"tag", b"hc1-key")
    raw = encode_entry(entry)
    with pytest.raises(ValueError, match="not an index entry"):
        decode_entry(raw[: ENTRY.size - 1])
    with pytest.raises(ValueError, match="short record"):
        decode_entry(raw[:-1])
    with pytest.raises(ValueError, match="version 9"):
        decode_entry(b"\x09" + raw[1:])


recency_fields = st.tuples(U16, U32, st.sampled_from([0, PINNED]), U64, st.binary(min_size=16, max_size=16))


@settings(max_examples=100, deadline=None)
@given(st.lists(recency_fields, min_size=2, max_size=30))
def test_recency_keys_sort_by_group_chunk_tier_and_seq(fields: list[tuple[int, int, int, int, bytes]]) -> None:
    keys = [recency_key(*values) for values in fields]
    assert sorted(keys) == [recency_key(*values) for values in sorted(fields)]
    for (group, chunk, tier, seq, _digest), key in zip(fields, keys, strict=True):
        assert key.startswith(recency_prefix(group, chunk, tier)) and recency_seq(key) == seq
        assert key[-16:] == _digest


def test_an_entrys_recency_key_is_its_place_in_the_replacement_order() -> None:
    digest = key_digest(b"k")
    entry = Entry(PINNED, 2, 8192, 8000, 77, 0, 0, (slot_ref(1, 2),), b"", b"k")
    assert entry.recency_key(digest) == recency_key(2, 8192, PINNED, 77, digest)
    older_unpinned = recency_key(2, 8192, 0, 1 << 60, digest)
    assert older_unpinned < entry.recency_key(digest)  # the unpinned tier of a size comes first


@given(U32, U32)
def test_a_slot_reference_holds_its_region_and_slot(region: int, slot: int) -> None:
    ref = slot_ref(region, slot)
    assert split_ref(ref) == (region, slot) and 0 <= ref < 1 << 64
    assert (slot_ref(region, slot) < slot_ref(region + 1, 0)) or region == 0xFFFFFFFF


def test_digests_and_checksum_seeds_bind_bytes_to_a_key() -> None:
    first, second = key_digest(b"hc1-a.key"), key_digest(b"hc1-b.key")
    assert len(first) == 16 and first != second and key_digest(b"hc1-a.key") == first
    assert checksum_seed(first) == int.from_bytes(first[8:], "little") != checksum_seed(second)


@given(st.binary(min_size=16, max_size=16), U64, U64)
def test_small_records_round_trip(digest: bytes, writer: int, claimed: int) -> None:
    claim = Claim(digest, writer, claimed)
    assert unpack(Claim, pack(claim)) == claim
    region = Region(writer & 0xFFFFFFFF, claimed & 0xFFFFFFFF, 3)
    assert unpack(Region, pack(region)) == region
    size = SizeClass(writer & 0xFFFF, NO_REGION)
    assert unpack(SizeClass, pack(size)) == size


def test_an_entry_made_recent_in_place_keeps_every_other_field() -> None:
    digest = bytes(range(16))
    entry = Entry(1, 7, 1 << 20, 3 << 20, 1_000, 42, 5, (1, 2, 3), b"tag", b"hc1-x.key")
    changed = with_seq(encode_entry(entry), 1_000, 2_000)
    assert changed is not None
    old, new, raw = changed
    assert decode_entry(raw) == entry._replace(seq=2_000)
    assert old + digest == entry.recency_key(digest)
    assert new + digest == entry._replace(seq=2_000).recency_key(digest)
    assert with_seq(encode_entry(entry), 999, 2_000) is None  # written or made recent since it was read
    assert with_seq(encode_entry(entry), 1_000, 500) is None  # never older than it is
