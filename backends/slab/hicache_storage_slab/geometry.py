"""How a store's capacity is divided: the index, the data files, regions, and the chunks of a page.

A store at ``path`` is::

    slab.state         the geometry (JSON, one block), written when the store is created
    slab.lock          an empty file: its ``flock`` serialises creating and removing the store
    slab.index         the index (LMDB), at most ``index_bytes`` of disk
    slab.index-lock    the index's lock file (its reader table)
    slab.data-<i>      data files, preallocated: regions of ``region_bytes``, from offset 0

``capacity_bytes`` covers all of them. The data area is lent to page sizes a region at a time: a
region holds slots of one size (a *chunk* size), and a page is stored as one chunk or, when that
packs a region badly (or the page is larger than a region), as a few equal chunks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from hicache_storage.plugin import ConfigError

__all__ = [
    "BLOCK",
    "ENTRY_COST",
    "MAX_CHUNKS",
    "MIN_INDEX_BYTES",
    "ChunkPlan",
    "StoreGeometry",
    "capacity_for",
    "chunk_plan",
]

#: File system block: chunks of pages of at least this size are multiples of it (what ``O_DIRECT`` needs).
BLOCK = 4096
#: Chunks of smaller pages are multiples of this.
SECTOR = 512
#: Index bytes one stored page may take (its entry, replacement key and slot record, B-tree slack).
ENTRY_COST = 512
#: Index bytes kept for its databases' roots and the pages a transaction copies.
INDEX_OVERHEAD = 2 << 20
#: Smallest index.
MIN_INDEX_BYTES = INDEX_OVERHEAD + 64 * ENTRY_COST
#: Disk kept for the index's lock file (its reader table) and the state file.
FIXED_RESERVE = 128 << 10
#: Disk kept per data file for the file system's own records of its extents.
PER_FILE_RESERVE = 64 << 10
#: Fewest regions a store has (a smaller data area gets smaller regions).
MIN_REGIONS = 8
#: How many chunk counts are tried for a page size (from the fewest that fit a region).
MAX_CHUNKS = 64
#: Largest region (what sizes a new index when the page size's chunking is not known yet).
MAX_REGION = 1 << 30
#: Regions per store at most (a region number and a slot number share one 64-bit slot reference).
MAX_REGIONS = 1 << 31


@dataclass(frozen=True)
class ChunkPlan:
    """How pages of ``page_bytes`` are stored: ``chunks`` slots of ``chunk_bytes`` each, ``per_region``
    slots in a region."""

    page_bytes: int
    chunks: int
    chunk_bytes: int
    per_region: int

    def bounds(self) -> list[tuple[int, int]]:
        """(offset in the page, length) of each chunk; the last may be shorter than ``chunk_bytes``."""
        step = self.chunk_bytes
        return [(i * step, min(step, self.page_bytes - i * step)) for i in range(self.chunks)]

    @property
    def stored_bytes(self) -> int:
        """Bytes of data area one page takes."""
        return self.chunks * self.chunk_bytes


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def chunk_plan(page_bytes: int, region_bytes: int) -> ChunkPlan:
    """The chunking of pages of ``page_bytes`` in regions of ``region_bytes``.

    The fewest chunks whose packing uses a region within 1/32 of the best packing found (one chunk per
    page when the page fits a region well). Chunks are whole blocks (4 KiB), or whole sectors (512 B)
    for pages smaller than a block. :class:`ValueError` for a page of no bytes.
    """
    if page_bytes <= 0:
        raise ValueError(f"a page must hold bytes, got {page_bytes}")
    first = max(1, math.ceil(page_bytes / region_bytes))
    unit = BLOCK if page_bytes >= BLOCK else SECTOR
    options: list[tuple[float, int, int]] = []
    for chunks in range(first, first + MAX_CHUNKS):
        chunk = _round_up(math.ceil(page_bytes / chunks), unit)
        if chunk > region_bytes:
            continue
        if chunks > 1 and chunk * (chunks - 1) >= page_bytes:
            continue  # fewer chunks of this size already hold the page
        per_region = region_bytes // chunk
        useful = per_region * page_bytes / chunks / region_bytes
        options.append((useful, chunks, chunk))
        if useful >= 1.0 - 1e-9:
            break
    best = max(useful for useful, _chunks, _chunk in options)
    _useful, chunks, chunk = next(option for option in options if option[0] >= best - 1 / 32)
    return ChunkPlan(page_bytes, chunks, chunk, region_bytes // chunk)


def _floor_pow2(value: int) -> int:
    return 1 << (value.bit_length() - 1) if value > 0 else 0


@dataclass(frozen=True)
class StoreGeometry:
    """A store's layout on disk (recorded in ``slab.state`` when the store is created)."""

    capacity_bytes: int
    index_bytes: int
    region_bytes: int
    regions: int
    file_bytes: int  # bytes of a full data file (a whole number of regions)
    files: int
    max_pages: int  # most pages the index holds (more evict the least recently used)

    @classmethod
    def plan(
        cls, capacity_bytes: int, *, region_bytes: int, file_bytes: int, index_bytes: int | None, page_bytes: int
    ) -> StoreGeometry:
        """The geometry of a new store; the index is sized for pages of ``page_bytes`` unless given.

        Raises :class:`ConfigError` naming ``extra_config.capacity_bytes`` when it leaves no room for data.
        """
        if index_bytes is None:
            pages = capacity_bytes // chunk_plan(page_bytes, MAX_REGION).stored_bytes
            index_bytes = min(INDEX_OVERHEAD + pages * ENTRY_COST, capacity_bytes // 4)
        index_bytes = max(MIN_INDEX_BYTES, index_bytes)
        index_bytes = _round_up(index_bytes, BLOCK)
        room = capacity_bytes - index_bytes - FIXED_RESERVE
        region = min(region_bytes, _floor_pow2(room // MIN_REGIONS))
        if region < 64 << 10:
            raise ConfigError(
                "extra_config.capacity_bytes", f"{capacity_bytes} bytes leave no room for data beside the index"
            )
        per_file = max(1, file_bytes // region)
        # each data file also takes PER_FILE_RESERVE of the capacity
        regions = room // region
        while regions > 0 and regions * region + math.ceil(regions / per_file) * PER_FILE_RESERVE > room:
            regions -= 1
        regions = min(regions, MAX_REGIONS)
        return cls(
            capacity_bytes=capacity_bytes,
            index_bytes=index_bytes,
            region_bytes=region,
            regions=regions,
            file_bytes=per_file * region,
            files=math.ceil(regions / per_file),
            max_pages=(index_bytes - INDEX_OVERHEAD) // ENTRY_COST,
        )

    @property
    def regions_per_file(self) -> int:
        return self.file_bytes // self.region_bytes

    @property
    def data_bytes(self) -> int:
        """Bytes of all regions together."""
        return self.regions * self.region_bytes

    def file_size(self, index: int) -> int:
        """Size of data file ``index`` (the last one may hold fewer regions)."""
        first = index * self.regions_per_file
        return min(self.regions_per_file, self.regions - first) * self.region_bytes

    def locate(self, region: int, slot: int, chunk_bytes: int) -> tuple[int, int]:
        """(data file index, byte offset) of slot ``slot`` of ``region`` holding chunks of ``chunk_bytes``."""
        per_file = self.regions_per_file
        return region // per_file, (region % per_file) * self.region_bytes + slot * chunk_bytes

    def chunk_plan(self, page_bytes: int) -> ChunkPlan:
        return chunk_plan(page_bytes, self.region_bytes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, values: dict[str, Any]) -> StoreGeometry:
        """The geometry recorded in ``values``; :class:`ValueError` when it is not one."""
        try:
            geometry = cls(**{name: int(values[name]) for name in cls.__dataclass_fields__})
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a slab geometry: {error}") from None
        if (
            min(geometry.regions, geometry.region_bytes, geometry.max_pages) <= 0
            or geometry.file_bytes % geometry.region_bytes
        ):
            raise ValueError("not a slab geometry: inconsistent sizes")
        return geometry


def capacity_for(pages: int, page_bytes: int, *, region_bytes: int = 1 << 20, file_bytes: int = 64 << 30) -> int:
    """The smallest ``capacity_bytes`` (a multiple of 1 MiB, at least 8 MiB) whose store holds ``pages``
    pages of ``page_bytes`` (one page size, its index sized for it)."""
    plan = chunk_plan(page_bytes, region_bytes)

    def holds(capacity: int) -> bool:
        try:
            geometry = StoreGeometry.plan(
                capacity, region_bytes=region_bytes, file_bytes=file_bytes, index_bytes=None, page_bytes=page_bytes
            )
        except ConfigError:
            return False
        slots = geometry.regions * (geometry.region_bytes // geometry.chunk_plan(page_bytes).chunk_bytes)
        return slots // plan.chunks >= pages and geometry.max_pages >= pages

    low, high = 8, max(8, -(-pages * plan.stored_bytes * 2 // (1 << 20)) + 8)
    while not holds(high << 20):
        high *= 2
    while low < high:
        middle = (low + high) // 2
        if holds(middle << 20):
            high = middle
        else:
            low = middle + 1
    return high << 20
