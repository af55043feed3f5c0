"""The raw baseline the mooncake backend offers to ``hicache-storage bench``, against the real master."""

from __future__ import annotations

import os
import re
import secrets

import numpy as np
import pytest
from hicache_storage_mooncake import MooncakeBackend
from hicache_storage_mooncake.raw_baseline import RawMooncake
from mooncake_support import client_options

from hicache_storage import make_config
from hicache_storage.cli.bench import run_bench
from hicache_storage.plugin import raw_baseline_for

pytestmark = pytest.mark.timeout(120)


def pages(count: int, size: int) -> list[memoryview]:
    return [memoryview(bytearray(os.urandom(size))) for _ in range(count)]


def test_round_trip_exists_and_close(mooncake: None) -> None:
    # A staging buffer of two pages: a batch of five travels in three rounds.
    options = client_options(staging_buffer_size=8192)
    raw = raw_baseline_for(MooncakeBackend, make_config(extra_config=options))
    assert isinstance(raw, RawMooncake)
    keys = [secrets.token_hex(8) for _ in range(5)]
    data = [*pages(4, 4096), np.arange(2048, dtype=np.uint16).reshape(2, 1024).data]  # not flat bytes: cast
    try:
        assert raw.set(keys, data) == [True] * 5
        assert raw.set(keys[:1], data[1:2]) == [True]  # an overwrite
        assert raw.exists([*keys, "absent"]) == [True] * 5 + [False]
        out = [*pages(5, 4096), memoryview(bytearray(10))]
        assert raw.get([*keys, "absent"], out) == [True] * 5 + [False]
        assert [bytes(view) for view in out[:5]] == [bytes(view) for view in [data[1], *data[1:]]]
        assert raw.get(keys[:1], [memoryview(bytearray(8192))]) == [False]  # more than the object holds: a miss
        assert raw.key(keys[0]) == f"{options['key_prefix']}raw-baseline/{keys[0]}"
        with pytest.raises(ValueError, match="staging_buffer_size"):
            raw.set(["big"], pages(1, 8193))
    finally:
        raw.close()
    check = raw_baseline_for(MooncakeBackend, make_config(extra_config=options))
    assert check is not None
    try:
        assert check.exists(keys) == [False] * 5
    finally:
        check.close()


def test_bench_reports_ratios_against_raw_store_calls(mooncake: None) -> None:
    options = client_options()
    result = run_bench("mooncake", options, page_bytes=8192, pages=16, batch=8)
    assert result["byte_exact"]
    assert result["raw"] is not None
    assert result["raw"]["get"]["ok"] == 16
    assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
    print("mooncake", result["ratio_ours_over_raw"])
    raw = raw_baseline_for(MooncakeBackend, make_config(extra_config=options))
    assert isinstance(raw, RawMooncake)
    try:
        assert raw.store.remove_by_regex("^" + re.escape(raw.prefix), True) == 0  # the baseline left nothing
        assert raw.store.remove_by_regex("^" + re.escape(options["key_prefix"]), True) == 0  # bench cleared its pages
    finally:
        raw.close()
