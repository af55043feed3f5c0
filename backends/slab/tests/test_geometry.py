"""How a store's capacity is divided (index, reserves, regions, data files) and how a page is chunked."""

from __future__ import annotations

import json
import math

import pytest
from hicache_storage_slab.geometry import (
    BLOCK,
    ENTRY_COST,
    FIXED_RESERVE,
    INDEX_OVERHEAD,
    MIN_INDEX_BYTES,
    MIN_REGIONS,
    PER_FILE_RESERVE,
    SECTOR,
    StoreGeometry,
    chunk_plan,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_storage import ConfigError

MIB = 1 << 20
GIB = 1 << 30


def plan(capacity: int, page_bytes: int = 4096, **kwargs: int | None) -> StoreGeometry:
    values: dict[str, int | None] = {"region_bytes": MIB, "file_bytes": 64 * GIB, "index_bytes": None, **kwargs}
    return StoreGeometry.plan(capacity, page_bytes=page_bytes, **values)  # type: ignore[arg-type]


def used_bytes(geometry: StoreGeometry) -> int:
    """What the geometry takes of its capacity: index, fixed reserve, regions, per-file reserves."""
    return geometry.index_bytes + FIXED_RESERVE + geometry.data_bytes + geometry.files * PER_FILE_RESERVE


# ----------------------------------------------------------------------------- the index
def test_the_index_is_sized_for_the_pages_the_capacity_could_hold() -> None:
    geometry = plan(256 * MIB, page_bytes=64 << 10)  # 4096 pages of 64 KiB at most
    assert geometry.index_bytes == INDEX_OVERHEAD + 4096 * ENTRY_COST
    assert geometry.max_pages == 4096
    small_pages = plan(256 * MIB, page_bytes=768)  # 1 KiB chunks: the index would pass a quarter of the store
    assert small_pages.index_bytes == 64 * MIB and small_pages.max_pages == (64 * MIB - INDEX_OVERHEAD) // ENTRY_COST


def test_the_index_has_a_floor_and_a_given_size_wins() -> None:
    tiny = plan(8 * MIB, page_bytes=768)  # a quarter of 8 MiB is below the smallest index
    assert tiny.index_bytes == MIN_INDEX_BYTES and tiny.max_pages == 64
    given_size = plan(64 * MIB, index_bytes=3 * MIB + 100)
    assert given_size.index_bytes == 3 * MIB + BLOCK  # rounded up to a block
    assert given_size.max_pages == (given_size.index_bytes - INDEX_OVERHEAD) // ENTRY_COST
    assert plan(64 * MIB, index_bytes=1).index_bytes == MIN_INDEX_BYTES


# ----------------------------------------------------------------------------- regions and files
def test_a_small_store_gets_smaller_regions() -> None:
    small = plan(8 * MIB)
    assert small.region_bytes < MIB and small.regions >= MIN_REGIONS
    assert small.region_bytes == 1 << (((8 * MIB - small.index_bytes - FIXED_RESERVE) // MIN_REGIONS).bit_length() - 1)
    large = plan(GIB)
    assert large.region_bytes == MIB and large.regions > 500
    assert plan(GIB, region_bytes=64 << 10).region_bytes == 64 << 10  # never larger than asked


@pytest.mark.parametrize("capacity", [8 * MIB, 8 * MIB + 12345, 100 * MIB, 3 * GIB + 7])
@pytest.mark.parametrize("file_bytes", [MIB, 5 * MIB, 64 * GIB])
def test_regions_fit_the_capacity_with_the_reserves(capacity: int, file_bytes: int) -> None:
    geometry = plan(capacity, file_bytes=file_bytes)
    assert used_bytes(geometry) <= capacity
    one_more = geometry.index_bytes + FIXED_RESERVE + (geometry.regions + 1) * geometry.region_bytes
    one_more += math.ceil((geometry.regions + 1) / geometry.regions_per_file) * PER_FILE_RESERVE
    assert one_more > capacity  # as many regions as fit
    assert geometry.file_bytes % geometry.region_bytes == 0 and geometry.file_bytes <= max(file_bytes, MIB)
    assert geometry.files == math.ceil(geometry.regions / geometry.regions_per_file)
    assert sum(geometry.file_size(i) for i in range(geometry.files)) == geometry.data_bytes
    assert 0 < geometry.file_size(geometry.files - 1) <= geometry.file_bytes


def test_every_slot_has_its_own_place_in_the_files() -> None:
    geometry = plan(40 * MIB, file_bytes=3 * MIB)  # regions of 1 MiB, 3 to a file
    assert geometry.regions_per_file == 3 and geometry.files > 3
    chunk = 256 << 10
    places = {geometry.locate(region, slot, chunk) for region in range(geometry.regions) for slot in range(4)}
    assert len(places) == geometry.regions * 4
    for index, offset in places:
        assert offset >= 0 and offset + chunk <= geometry.file_size(index)
    assert geometry.locate(4, 1, chunk) == (1, MIB + chunk)


@pytest.mark.parametrize("capacity", [2 * MIB, MIN_INDEX_BYTES + FIXED_RESERVE + 8 * (32 << 10)])
def test_a_capacity_that_leaves_no_room_for_data_names_the_option(capacity: int) -> None:
    with pytest.raises(ConfigError) as caught:
        plan(capacity)
    assert caught.value.option == "extra_config.capacity_bytes"
    assert str(capacity) in str(caught.value)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(8 * MIB, 1 << 37),
    region_log=st.integers(16, 30),
    file_bytes=st.integers(MIB, 1 << 38),
    page_bytes=st.integers(1, 64 * MIB),
)
def test_any_geometry_fits_its_capacity(capacity: int, region_log: int, file_bytes: int, page_bytes: int) -> None:
    geometry = plan(capacity, page_bytes=page_bytes, region_bytes=1 << region_log, file_bytes=file_bytes)
    assert used_bytes(geometry) <= capacity
    assert geometry.regions >= 1 and geometry.max_pages >= 64
    assert 64 << 10 <= geometry.region_bytes <= 1 << region_log
    assert geometry.region_bytes & (geometry.region_bytes - 1) == 0
    assert StoreGeometry.from_json(json.loads(json.dumps(geometry.to_json()))) == geometry


# ----------------------------------------------------------------------------- JSON
def test_the_geometry_round_trips_through_json_and_refuses_anything_else() -> None:
    geometry = plan(100 * MIB, file_bytes=8 * MIB)
    recorded = json.loads(json.dumps(geometry.to_json()))
    assert StoreGeometry.from_json(recorded) == geometry
    for broken in (
        {key: value for key, value in recorded.items() if key != "regions"},  # a field missing
        {**recorded, "regions": "many"},  # not a number
        {**recorded, "regions": 0},  # no region
        {**recorded, "file_bytes": recorded["region_bytes"] + 1},  # not whole regions
        {},
    ):
        with pytest.raises(ValueError, match="not a slab geometry"):
            StoreGeometry.from_json(broken)


# ----------------------------------------------------------------------------- chunks of a page
@pytest.mark.parametrize("page_bytes", [4096, 64 << 10, 256 << 10, MIB])
def test_a_page_that_packs_well_is_one_chunk(page_bytes: int) -> None:
    chunks = chunk_plan(page_bytes, MIB)
    assert (chunks.chunks, chunks.chunk_bytes, chunks.per_region) == (1, page_bytes, MIB // page_bytes)
    assert chunks.bounds() == [(0, page_bytes)] and chunks.stored_bytes == page_bytes


def test_a_page_larger_than_a_region_is_several_equal_chunks() -> None:
    chunks = chunk_plan(3 * MIB, MIB)
    assert (chunks.chunks, chunks.chunk_bytes, chunks.per_region) == (3, MIB, 1)
    odd = chunk_plan(3 * MIB + 5, MIB)  # 4 chunks would fill 75 % of a region each: more, smaller ones
    assert odd.chunks > 4 and odd.chunk_bytes < MIB and odd.chunk_bytes % BLOCK == 0
    assert odd.per_region * odd.chunk_bytes / MIB > 0.9
    last = odd.chunks - 1
    assert odd.bounds()[-1] == (last * odd.chunk_bytes, 3 * MIB + 5 - last * odd.chunk_bytes)


def test_a_page_that_packs_badly_is_split() -> None:
    whole_page = (MIB // (600 << 10)) * (600 << 10) / MIB  # one 600 KiB slot per region: 59 % used
    chunks = chunk_plan(600 << 10, MIB)
    assert chunks.chunks == 3 and chunks.chunk_bytes == 200 << 10 and chunks.per_region == 5
    assert chunks.per_region * chunks.chunk_bytes / MIB > whole_page + 0.3
    assert [length for _offset, length in chunks.bounds()] == [200 << 10] * 3


@pytest.mark.parametrize(("page_bytes", "chunk_bytes"), [(1, 512), (100, 512), (768, 1024), (4095, 4096)])
def test_pages_below_a_block_take_whole_sectors(page_bytes: int, chunk_bytes: int) -> None:
    chunks = chunk_plan(page_bytes, 64 << 10)
    assert (chunks.chunks, chunks.chunk_bytes) == (1, chunk_bytes)
    assert chunks.per_region == (64 << 10) // chunk_bytes


@pytest.mark.parametrize("page_bytes", [0, -1])
def test_a_page_of_no_bytes_is_refused(page_bytes: int) -> None:
    with pytest.raises(ValueError, match="must hold bytes"):
        chunk_plan(page_bytes, MIB)


@settings(max_examples=300, deadline=None)
@given(page_bytes=st.integers(1, 256 * MIB), region_log=st.integers(16, 30))
def test_chunks_cover_the_page_and_fit_a_region(page_bytes: int, region_log: int) -> None:
    region = 1 << region_log
    chunks = chunk_plan(page_bytes, region)
    unit = BLOCK if page_bytes >= BLOCK else SECTOR
    assert chunks.page_bytes == page_bytes and chunks.chunks >= 1
    assert chunks.chunk_bytes % unit == 0 and chunks.chunk_bytes <= region
    assert chunks.per_region == region // chunks.chunk_bytes >= 1
    assert chunks.chunks * chunks.chunk_bytes >= page_bytes > (chunks.chunks - 1) * chunks.chunk_bytes
    bounds = chunks.bounds()
    assert [offset for offset, _length in bounds] == [i * chunks.chunk_bytes for i in range(chunks.chunks)]
    assert sum(length for _offset, length in bounds) == page_bytes
    assert all(0 < length <= chunks.chunk_bytes for _offset, length in bounds)
    if page_bytes <= region:  # never packs worse than a page per slot (within the 1/32 it trades for fewer chunks)
        whole = region // -(-page_bytes // unit * unit) * page_bytes / region
        assert chunks.per_region * page_bytes / chunks.chunks / region >= whole - 1 / 32
