"""The slab's benchmark scripts run end to end on a few pages (figures are not judged here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(180)

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


def _run(script: str, *args: str, tmp_path: Path) -> dict:
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == [out], "the benchmark left data behind"
    return json.loads(out.read_text())


def test_bench_slab_compares_every_side_in_steady_state(tmp_path: Path) -> None:
    result = _run("bench_slab.py", "--pages", "8", "--batch", "4", "--repeat", "1", tmp_path=tmp_path)
    assert result["sides"][:4] == ["slab", "raw", "file", "file_growing"]
    for phase in ("write", "read_warm", "read_cold"):
        for pair in ("slab/raw", "slab/file", "slab/file_growing", "file/raw"):
            assert result["ratios"][f"{pair} {phase}"] > 0
    assert result["file_evictions"]["file"] > 0, "the file side never reached its size limit"
    assert result["file_evictions"]["file_growing"] == 0
    counters = result["slab_counters"]
    assert counters.get("integrity_failures", 0) == 0, counters


def test_read_ceiling_reports_every_path(tmp_path: Path) -> None:
    result = _run("slab_read_ceiling.py", "--pages", "8", "--threads", "2", "--repeat", "2", tmp_path=tmp_path)
    paths = ("preadv", "preadv+xxh3", "mapped+xxh3", "Store.read", "batch_get_v1")
    assert set(result["us_per_page"]) == {f"{path} {threads}" for path in paths for threads in (1, 2)}
    assert all(value > 0 for value in result["us_per_page"].values())
    assert result["ratio_to_preadv"]["preadv 1"] == 1.0
    assert result["ratio_to_verified_ceiling"]["preadv+xxh3 1"] == 1.0


def test_first_pass_builds_new_stores_each_repetition(tmp_path: Path) -> None:
    result = _run(
        "bench_slab_first_pass.py", "--pages", "8", "--batch", "4", "--repeat", "3", "--writeback", tmp_path=tmp_path
    )
    assert len(result["ratios"]) == 3 and result["writeback"] is True
    assert all(len(result["gbps"][side]) == 3 and min(result["gbps"][side]) > 0 for side in ("slab", "file"))
    spread = result["ratio_slab_over_file"]
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert all(seconds > 0 for seconds in result["creation_seconds"]["slab"])


def test_replacement_comparison_replays_every_side_at_every_budget(tmp_path: Path) -> None:
    result = _run(
        "bench_slab_replacement.py", "--sizes", "128k", "--requests", "30", "--budget-scale", "0.05", tmp_path=tmp_path
    )
    rows = result["settings"]["128k"]["rows"]
    assert [row["budget"] for row in rows] == [15_000_000, 17_500_000, 20_000_000, 22_500_000, 25_000_000]
    for row in rows:
        assert set(row["storage_hit_tokens"]) == {"oracle", "file", "slab", "file+keys", "slab+keys"}
        assert row["input_tokens"] > 0 and all(hits >= 0 for hits in row["storage_hit_tokens"].values())
    assert "slab/oracle" in result["settings"]["128k"]["summed_ratios"]
