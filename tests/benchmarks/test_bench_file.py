"""benchmarks/bench_file.py completes on a few pages and removes its files."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import left_behind, run_json

pytestmark = pytest.mark.timeout(180)


def test_bench_file_reports_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = run_json("bench_file.py", "--pages", "4", "--batch", "2", "--repeat", "1", "--dir", str(tmp_path), out=out)
    assert set(result["gbps"]) == {"ours_write", "raw_write", "ours_read", "raw_read"}
    assert result["ratio_write"] > 0 and result["ratio_read"] > 0
    assert left_behind(tmp_path, out) == []
