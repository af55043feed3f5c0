"""The slab backend's options: each bad value names its option; options of the earlier layout say what
replaced them; the directory comes from ``path`` or ``$HICACHE_SLAB_PATH``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab import PATH_ENV, SlabBackend, SlabOptions
from hicache_storage_slab.options import MIN_CAPACITY, io_thread_count, resolve_root

from hicache_storage import ConfigError, HiCacheStorage, make_config

MIB = 1 << 20


@pytest.mark.parametrize(
    ("values", "option"),
    [
        ({"capacity_bytes": MIN_CAPACITY - 1}, "capacity_bytes"),
        ({"region_bytes": 32 << 10}, "region_bytes"),
        ({"region_bytes": 2 << 30}, "region_bytes"),
        ({"region_bytes": 3 << 16}, "region_bytes"),
        ({"index_bytes": MIB}, "index_bytes"),
        ({"capacity_bytes": 8 * MIB, "index_bytes": 4 * MIB + 1}, "index_bytes"),
        ({"file_bytes": 4096}, "file_bytes"),
        ({"read_recency_s": -1}, "read_recency_s"),
        ({"read_recency_s": 3601}, "read_recency_s"),
        ({"read_recency_s": True}, "read_recency_s"),
        ({"io_threads": 0}, "io_threads"),
        ({"io_threads": 33}, "io_threads"),
        ({"quota_bytes": 0}, "quota_bytes"),
        ({"capacity_bytes": 8 * MIB, "quota_bytes": 8 * MIB + 1}, "quota_bytes"),
        ({"path": "  "}, "path"),
    ],
)
def test_bad_values_name_their_option(values: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SlabOptions(**values)
    assert caught.value.option == f"extra_config.{option}"


def test_the_defaults() -> None:
    options = SlabOptions()
    assert (options.capacity_bytes, options.region_bytes, options.index_bytes) == (1 << 30, MIB, None)
    assert (options.read_recency_s, options.quota_bytes, options.direct_io, options.fsync) == (1.0, None, False, False)
    assert io_thread_count(options) == min(4, os.cpu_count() or 1)
    assert io_thread_count(SlabOptions(io_threads=7)) == 7
    assert SlabOptions(read_recency_s=None, index_bytes=8 * MIB).read_recency_s is None


@pytest.mark.parametrize("name", ["ways", "choices", "pool_capacity_bytes"])
def test_options_of_the_earlier_layout_say_what_replaced_them(tmp_path: Path, name: str) -> None:
    config = make_config("m", extra_config={"path": str(tmp_path), name: 2})
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(SlabBackend, config)
    assert caught.value.option == f"extra_config.{name}"
    assert "no longer an option" in str(caught.value) and "whole store" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_option_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(SlabBackend, make_config("m", extra_config={"path": str(tmp_path), "capacity_byte": 1}))
    assert caught.value.option == "extra_config.capacity_byte" and "capacity_bytes" in str(caught.value)


def test_the_directory_comes_from_path_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "from-env"))
    assert resolve_root(SlabOptions()) == tmp_path / "from-env"
    assert SlabOptions(path=str(tmp_path / "given")).store_directory() == tmp_path / "given"
    monkeypatch.delenv(PATH_ENV)
    with pytest.raises(ConfigError) as caught:
        resolve_root(SlabOptions())
    assert caught.value.option == "extra_config.path" and PATH_ENV in str(caught.value)
