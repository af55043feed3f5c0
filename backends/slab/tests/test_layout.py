"""The slab's on-disk format: geometry planning, slot headers, superblocks, options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hicache_storage_slab import SlabOptions, layout
from hicache_storage_slab.layout import (
    BLOCK,
    COMMITTED,
    DAMAGED,
    EMPTY,
    ENTRY_SIZE,
    WRITING,
    Geometry,
    SuperblockError,
    decode_entry,
    decode_superblock,
    encode_entry,
    encode_superblock,
    key_digest,
    parse_superblock,
    payload_checksum,
    space_tag,
)
from slab_support import indices, make_backend, make_pool, slab_backend

from hicache_storage import ConfigError
from hicache_storage import testing as kit

MIB = 1 << 20


@pytest.mark.parametrize(
    ("page_bytes", "capacity", "ways", "file_bytes"),
    [
        (512 * 1024, 256 * MIB, 8, 64 * MIB),
        (768, 4 * MIB, 8, 64 << 30),
        (5000, 1 * MIB, 64, 1 << 30),
        (4096, 80_000, 8, MIB),
    ],
)
def test_geometry_fits_capacity_and_aligns_slots(page_bytes: int, capacity: int, ways: int, file_bytes: int) -> None:
    geometry = Geometry.plan(page_bytes, capacity, ways, file_bytes)
    assert geometry.total_bytes <= capacity
    assert geometry.slot_bytes % BLOCK == 0 and geometry.slot_bytes >= page_bytes
    assert geometry.data_offset % BLOCK == 0
    assert geometry.sets % geometry.files == 0 and geometry.ways <= ways
    per_slot = geometry.slot_bytes + ENTRY_SIZE
    assert geometry.slots >= (capacity - geometry.files * 2 * BLOCK) // per_slot - geometry.ways * geometry.files
    assert geometry.file_size <= max(file_bytes, geometry.data_offset + geometry.ways * geometry.slot_bytes)
    offsets = {geometry.slot_offset(s, w) for s in range(geometry.sets_per_file) for w in range(geometry.ways)}
    assert len(offsets) == geometry.sets_per_file * geometry.ways
    alignment = min(2 << 20, geometry.slot_bytes & -geometry.slot_bytes)  # 512 KiB pages: 512 KiB-aligned slots
    assert all(offset % alignment == 0 for offset in offsets)
    assert geometry.data_offset >= 4096 + geometry.sets_per_file * geometry.ways * ENTRY_SIZE
    assert max(offsets) + geometry.slot_bytes == geometry.file_size


def test_geometry_splits_files_and_rejects_a_capacity_below_one_slot() -> None:
    geometry = Geometry.plan(512 * 1024, 256 * MIB, 8, 64 * MIB)
    assert geometry.files == 4
    homes = {geometry.locate(key_digest(f"k{i}"))[0] for i in range(200)}
    assert homes == {0, 1, 2, 3}
    with pytest.raises(ConfigError, match="capacity_bytes"):
        Geometry.plan(1 * MIB, 512 * 1024, 8, 64 * MIB)
    assert Geometry.plan(1024, 64 * 1024, 64, MIB).ways < 64  # clamped to the slots there are


def test_entry_round_trip_and_damage() -> None:
    digest = key_digest("hc1-x.key.tp0of1")
    raw = encode_entry(COMMITTED, 4096, 7, digest, checksum=99, writer=5)
    assert len(raw) == ENTRY_SIZE
    entry = decode_entry(raw)
    assert (entry.state, entry.length, entry.seq, entry.digest, entry.checksum, entry.writer) == (
        COMMITTED,
        4096,
        7,
        digest,
        99,
        5,
    )
    assert decode_entry(bytes(ENTRY_SIZE)).state == EMPTY
    assert decode_entry(encode_entry(WRITING, 1, 1, digest, checksum=0, writer=1)).state == WRITING
    for position in (0, 5, 12, 30, 45, 60):
        damaged = bytearray(raw)
        damaged[position] ^= 0x01
        assert decode_entry(bytes(damaged)).state == DAMAGED, position
    torn = raw[:32] + encode_entry(COMMITTED, 4096, 8, key_digest("other"), checksum=1, writer=2)[32:]
    assert decode_entry(torn).state == DAMAGED


def test_payload_checksum_binds_bytes_to_the_key() -> None:
    data = bytearray(range(256)) * 64
    view = memoryview(data)
    a, b = key_digest("key-a"), key_digest("key-b")
    assert payload_checksum([view], a) == payload_checksum([view[:1000], view[1000:]], a)
    assert payload_checksum([view], a) != payload_checksum([view], b)
    changed = bytearray(data)
    changed[-1] ^= 1
    assert payload_checksum([memoryview(changed)], a) != payload_checksum([view], a)


def test_superblock_round_trip_and_mismatch() -> None:
    geometry = Geometry.plan(8192, 8 * MIB, 8, 64 * MIB)
    tag = space_tag("hc1-abc.")
    raw = encode_superblock(geometry, 0, tag)
    assert len(raw) == BLOCK
    assert parse_superblock(raw) == (geometry, 0, tag)
    decode_superblock(raw, geometry, 0, tag)
    with pytest.raises(SuperblockError):
        decode_superblock(raw, Geometry.plan(8192, 16 * MIB, 8, 64 * MIB), 0, tag)
    with pytest.raises(SuperblockError):
        decode_superblock(raw, geometry, 0, space_tag("hc1-other."))
    damaged = bytearray(raw)
    damaged[20] ^= 0xFF
    with pytest.raises(SuperblockError):
        parse_superblock(bytes(damaged))
    with pytest.raises(SuperblockError):
        parse_superblock(bytes(BLOCK))


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({"capacity_bytes": 1000}, "capacity_bytes"),
        ({"ways": 0}, "ways"),
        ({"ways": 65}, "ways"),
        ({"io_threads": 0}, "io_threads"),
        ({"file_bytes": 4096}, "file_bytes"),
        ({"path": "  "}, "path"),
        ({"pool_capacity_bytes": {"mamba": 10}}, "pool_capacity_bytes.mamba"),
        ({"pool_capacity_bytes": {"mamba": "big"}}, "pool_capacity_bytes.mamba"),
    ],
)
def test_options_are_checked(values: dict[str, object], option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SlabOptions(**values)  # type: ignore[arg-type]
    assert caught.value.option == f"extra_config.{option}"


def test_pool_capacity_overrides_the_default() -> None:
    options = SlabOptions(capacity_bytes=8 * MIB, pool_capacity_bytes={"mamba": 2 * MIB})
    assert options.capacity_for("mamba") == 2 * MIB
    assert options.capacity_for("kv") == 8 * MIB


def test_slab_files_of_the_earlier_layout_are_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patched:  # a slab written by the version-1 layout
        patched.setattr(layout, "FORMAT_VERSION", layout.LEGACY_VERSION)
        old = make_backend(tmp_path)
        old.close()
    (name,) = [n for n in os.listdir(tmp_path) if "slab-" in n]
    with pytest.raises(ConfigError) as caught:
        make_backend(tmp_path)
    assert caught.value.option == "extra_config.path"
    message = str(caught.value)
    assert "earlier layout" in message and f"rm {tmp_path}/" in message and name.endswith("slab-0")
    assert name in os.listdir(tmp_path)  # refused, not replaced
    cleaner = make_backend(tmp_path, make_pool(layout="layer_first"))  # another key space
    slab_backend(cleaner).clear_pages(None)  # every page below the path: the old files go too
    cleaner.close()
    assert os.listdir(tmp_path) == []
    fresh = make_backend(tmp_path)
    keys = kit.random_keys(2)
    assert fresh.batch_set_v1(keys, indices(0, 2)) == [True, True]
    fresh.close()
