"""benchmarks/bench_cross_tp.py compares split and unsplit pages on every layout it is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json

pytestmark = [pytest.mark.timeout(180)]


def test_bench_cross_tp_pairs_split_with_unsplit(tmp_path: Path) -> None:
    args = ["--backends", "file,sim", "--layouts", "page_head,layer_first", "--batch", "2", "--repeat", "1"]
    result = run_json("bench_cross_tp.py", *args, "--page-size", "4", "--layers", "2", out=tmp_path / "result.json")
    rows = result["rows"]
    assert [(row["backend"], row["layout"]) for row in rows] == [
        ("file", "page_head"),
        ("file", "layer_first"),
        ("sim", "page_head"),
        ("sim", "layer_first"),
    ]
    for row in rows:
        assert row["records_per_page"] == 2
        assert all(row[f"{op}_ratio"] > 0 for op in ("set", "exists", "get"))
        assert row["scatter_ms"] == 0 if row["layout"] == "page_head" else row["scatter_ms"] > 0
