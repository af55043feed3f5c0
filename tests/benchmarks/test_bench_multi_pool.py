"""benchmarks/bench_multi_pool.py completes on every backend it covers."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json, services_env

pytestmark = [pytest.mark.timeout(180), pytest.mark.services]


def test_bench_multi_pool_compares_v2_with_v1(tmp_path: Path) -> None:
    env = services_env("redis")
    result = run_json(
        "bench_multi_pool.py",
        "--backends",
        "file,sim,redis",
        "--batch",
        "2",
        "--repeat",
        "1",
        out=tmp_path / "result.json",
        env=env,
    )
    assert [row["backend"] for row in result["rows"]] == ["file", "sim", "redis"]
    for row in result["rows"]:
        assert all(row[f"{op}_ratio_v2_over_v1"] > 0 for op in ("set", "get", "exists"))
