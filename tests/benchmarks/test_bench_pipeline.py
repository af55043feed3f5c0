"""benchmarks/bench_pipeline.py completes with a couple of cycles."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json

pytestmark = pytest.mark.timeout(180)


def test_bench_pipeline_reports_bookkeeping_and_copies(tmp_path: Path) -> None:
    result = run_json("bench_pipeline.py", "--reps", "1", "--cycles", "2", out=tmp_path / "result.json")
    for backend in ("sim", "sim_keys_only", "instant", "instant_hybrid"):
        assert result[f"bookkeeping_{backend}"]["total_us_per_page"] > 0
    assert result["hybrid_over_kv_only"] > 0
    for pattern in ("contiguous", "scattered"):
        assert result[f"copy_{pattern}"]["copy_gbps"] > 0
