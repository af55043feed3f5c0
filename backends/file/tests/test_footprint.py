"""``max_bytes`` bounds what the store takes on disk; the fan-out fits the limit; stores stay readable."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_file import FileBackend
from hicache_storage_file.eviction import SizeLimit
from hicache_storage_file.footprint import Footprint, choose_fanout, directories_fit, fanout_for_limit, find_fanout
from hicache_storage_file.layout import PageLayout

from hicache_storage import HiCacheStorage, HostKVPool, make_config
from hicache_storage import testing as kit
from hicache_storage.plugin.page_format import HEADER_SIZE

pytestmark = pytest.mark.timeout(120)


def open_file(root: Path, pool: HostKVPool, **options: Any) -> HiCacheStorage:
    backend = HiCacheStorage(
        FileBackend, make_config("m", extra_config={"path": str(root), "resilience": False, **options})
    )
    backend.register_mem_pool_host(pool)
    return backend


def write(backend: HiCacheStorage, pool: HostKVPool, count: int) -> list[str]:
    """``count`` fresh pages in batches of 16 (every test pool has at least 16 pages)."""
    keys = kit.random_keys(count)
    for begin in range(0, count, 16):
        chunk = keys[begin : begin + 16]
        indices = kit.page_indices(0, len(chunk), pool.page_size)
        assert all(backend.batch_set_v1(chunk, indices))
    return keys


def disk_usage(root: Path) -> tuple[int, int, int, int]:
    """(allocated bytes, apparent bytes, files, directories) of everything under ``root``, as ``du`` counts."""
    allocated = apparent = files = directories = 0
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        allocated += info.st_blocks * 512
        apparent += info.st_size
        if path.is_dir():
            directories += 1
        else:
            files += 1
    return allocated, apparent, files, directories


def test_a_page_counts_its_blocks_and_its_directory_entry(tmp_path: Path) -> None:
    footprint = Footprint(str(tmp_path))
    assert footprint.block == os.statvfs(tmp_path).f_frsize
    block = footprint.block
    assert footprint.page(1) == footprint.page(block) == block
    assert footprint.page(block + 1) == 2 * block
    assert footprint.entry(f"/x/{'k' * 110}") == 2 * 120  # ext4: 8 bytes + the name, rounded to 4; doubled
    assert footprint.directory == block
    assert footprint.measure(str(tmp_path)) == os.stat(tmp_path).st_blocks * 512
    assert footprint.measure(str(tmp_path / "gone")) == 0


def test_the_fanout_of_a_new_store_fits_its_limit() -> None:
    assert fanout_for_limit(None) == 1  # unlimited: 256 directories
    assert fanout_for_limit(64 << 20) == 0
    assert fanout_for_limit(1_100_000_000) == 1
    assert fanout_for_limit(1 << 40) == 1  # never two levels by choice: 65,536 directories to create
    assert directories_fit(2, 1 << 40) and not directories_fit(2, 1 << 30)  # 65,792 blocks: 1/128 of 32.1 GiB
    assert directories_fit(1, 128 << 20) and not directories_fit(1, (128 << 20) - 1)
    assert directories_fit(0, 1)
    for limit in (1 << 20, 1 << 27, 1_100_000_000, 1 << 36, 1 << 44):
        levels = fanout_for_limit(limit)
        directories = sum(256**level for level in range(1, levels + 1))
        assert directories * 4096 <= limit / 128


@pytest.mark.parametrize("levels", [0, 1, 2, 3])
def test_an_existing_store_keeps_its_layout(tmp_path: Path, levels: int) -> None:
    """A store written with any fan-out (the old default of 2 included) is found and read, with a limit
    whose own choice would differ."""
    pool = kit.make_pool(seed=1)
    writer = open_file(tmp_path, pool, fanout_levels=levels, manifests=False)
    keys = write(writer, pool, 8)
    assert find_fanout(str(tmp_path)) == levels
    reader = open_file(tmp_path, kit.make_pool(seed=None), max_bytes=1 << 30)  # a new store would get 1 level
    assert reader.batch_exists(keys) == 8
    assert choose_fanout(str(tmp_path), None, 1 << 30) == levels
    assert choose_fanout(str(tmp_path), 3, 1 << 30) == 3  # an explicit fanout_levels wins


def test_a_new_store_gets_the_fanout_of_its_limit(tmp_path: Path) -> None:
    pool = kit.make_pool()
    backend = open_file(tmp_path / "a", pool, max_bytes=1_100_000_000, manifests=False)
    write(backend, pool, 40)
    depths = {len(path.relative_to(tmp_path / "a").parts) - 1 for path in (tmp_path / "a").rglob("hc*")}
    assert depths == {1}
    unlimited = open_file(tmp_path / "b", pool, manifests=False)
    write(unlimited, pool, 4)
    assert {len(path.relative_to(tmp_path / "b").parts) - 1 for path in (tmp_path / "b").rglob("hc*")} == {1}


@pytest.mark.parametrize("fanout", [None, 2])
def test_du_of_a_store_at_its_limit_stays_within_it(tmp_path: Path, fanout: int | None) -> None:
    """Written well past the limit by one process: ``du`` (allocated and apparent) stays within
    ``max_bytes``, with the chosen fan-out and with two levels asked for explicitly."""
    pool = HostKVPool(num_pages=64, page_size=16, layer_num=1, head_num=1, head_dim=64, dtype="uint8")
    record = HEADER_SIZE + pool.bytes_per_page  # 2,104 bytes: one 4 KiB block on disk
    limit = 400 * record
    backend = open_file(tmp_path, pool, max_bytes=limit, manifests=False, fanout_levels=fanout)
    write(backend, pool, 1200)
    allocated, apparent, files, directories = disk_usage(tmp_path)
    assert backend.stats.get("evictions") > 0
    assert allocated <= limit and apparent <= limit, (allocated, apparent, files, directories)
    if fanout is None:
        assert directories == 1  # under 128 MiB: every page in the root
        assert files > 180  # 400 records of 2,104 bytes in one block each: about 200 fit
    else:
        assert 0 < files < directories  # two levels for ~50 pages: the directories take most of the limit


def test_deleting_every_page_leaves_the_bare_root(tmp_path: Path) -> None:
    pool = kit.make_pool()
    backend = open_file(tmp_path, pool, manifests=False, fanout_levels=2)  # a directory pair per page
    keys = write(backend, pool, 6)
    assert any(path.is_dir() for path in tmp_path.iterdir())
    assert backend.delete(keys) == [True] * 6
    assert list(tmp_path.iterdir()) == []
    write(backend, pool, 6)
    backend.clear()
    assert list(tmp_path.iterdir()) == []


def test_eviction_removes_the_directories_it_empties_when_the_limit_needs_them(tmp_path: Path) -> None:
    pool = kit.make_pool()
    block = Footprint(str(tmp_path)).block
    # explicit 2 levels and room for a few pages only: each eviction empties its two directories
    backend = open_file(tmp_path, pool, max_bytes=40 * block, fanout_levels=2, manifests=False)
    write(backend, pool, 30)
    allocated, _apparent, files, directories = disk_usage(tmp_path)
    assert allocated <= 40 * block
    assert directories <= 1 + 2 * files


@pytest.mark.parametrize(("levels", "kept"), [(1, True), (2, False)])
def test_eviction_keeps_emptied_directories_when_the_limit_affords_them_all(
    tmp_path: Path, levels: int, kept: bool
) -> None:
    """1 GiB affords one level's 256 directories (the next page of the range needs its directory
    again), not two levels' 65,792: those are removed as evictions empty them."""
    footprint = Footprint(str(tmp_path))
    layout = PageLayout(str(tmp_path), levels)
    limit = SizeLimit(1 << 30, layout, footprint)
    assert limit.keeps_directories is kept
    layout.on_directory = limit.directory_created
    limit.seed([], [])

    def top(key: str) -> str:
        return Path(layout.directory_for(key)).relative_to(tmp_path).parts[0]

    keys = kit.random_keys(64)
    first, second = keys[0], next(key for key in keys if top(key) != top(keys[0]))  # directories of their own
    paths = []
    for key in (first, second):  # recorded at 600 MiB each: the second evicts the first
        layout.ensure_directory(layout.directory_for(key))
        paths.append(Path(layout.path_for(key)))
        paths[-1].write_bytes(b"page")
        limit.record_batch([(str(paths[-1]), 600 << 20)])
        limit.evict()
    assert not paths[0].exists() and paths[1].exists()
    assert paths[0].parent.is_dir() is kept
    assert (tmp_path / top(first)).is_dir() is kept
    assert limit.total_bytes <= 1 << 30
