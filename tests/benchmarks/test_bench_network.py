"""benchmarks/bench_network.py completes on every section, control rows included."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json, services_env

pytestmark = [pytest.mark.timeout(240), pytest.mark.services]

SECTIONS = ("redis", "redis-cluster", "s3", "fsspec")
#: The section names the rows carry, each also timed as a control (the raw client against itself).
ROWS = {"redis", "redis-cluster", "s3", "fsspec-s3fs"}


def test_bench_network_reports_every_section(tmp_path: Path) -> None:
    env = services_env("redis", "redis-cluster", "s3")
    args = ("--sections", ",".join(SECTIONS), "--batches", "2", "--reps", "1", "--settle-ms", "0", "--control")
    result = run_json("bench_network.py", *args, out=tmp_path / "result.json", env=env)
    assert {row["section"] for row in result["rows"]} == ROWS | {f"{name} (control)" for name in ROWS}
    assert all(row["get_ratio"] > 0 for row in result["rows"])
