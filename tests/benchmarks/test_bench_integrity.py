"""benchmarks/bench_integrity.py completes on a few pages."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json

pytestmark = pytest.mark.timeout(120)


def test_bench_integrity_reports_every_way(tmp_path: Path) -> None:
    result = run_json("bench_integrity.py", "--pages", "2", "--rounds", "1", out=tmp_path / "result.json")
    assert [row["way"] for row in result["rows"]] == ["checksum", "key digest", "secret"]
    assert all(row["us_per_page"] > 0 for row in result["rows"])
