"""benchmarks/bench_vs_sglang.py completes on a few pages (opt-in: ``scripts/sglang-test.sh``).

Needs the released sglang package on ``PYTHONPATH`` (what the SGLang target sets up) and the
mooncake test services; skipped without sglang, unless the SGLang target requires it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
from bench_support import left_behind, run_json, services_env


def _sglang_installed() -> bool:
    if "sglang" in sys.modules:  # imported already (the SGLang tests register its package directory)
        return True
    try:
        return importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):
        return False


SGLANG = _sglang_installed()
if os.environ.get("HICACHE_SGLANG_REQUIRED") and not SGLANG:
    raise RuntimeError("HICACHE_SGLANG_REQUIRED is set, but sglang is not importable")
pytestmark = [
    pytest.mark.sglang,
    pytest.mark.services,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not SGLANG, reason="sglang is not importable; run scripts/sglang-test.sh"),
]

SIDES = {
    "HiCacheFile",
    "file zero-copy",
    "file generic",
    "slab zero-copy",
    "slab generic",
    "MooncakeStore",
    "mooncake zero-copy",
    "mooncake generic",
}


def test_bench_vs_sglang_compares_every_side(tmp_path: Path) -> None:
    env = services_env("mooncake")
    out = tmp_path / "result.json"
    args = ("--batch", "4", "--repeat", "1", "--dir", str(tmp_path))
    result = run_json("bench_vs_sglang.py", *args, out=out, env=env, timeout_s=280)
    assert set(result["sides"]) == SIDES
    assert len(result["ratios"]) == 6
    for row in result["ratios"].values():
        assert row["write"]["median"] > 0 and row["read"]["median"] > 0
    assert result["file_group"]["resident_pages"] == 32  # 8 batches of 4
    assert set(result["file_group"]["resident_sides"]) == {"HiCacheFile", "file zero-copy", "file generic"}
    assert len(result["load_average_per_repetition"]) == 2  # the untimed one and the timed one
    assert left_behind(tmp_path, out) == []
