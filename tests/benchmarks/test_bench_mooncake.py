"""benchmarks/bench_mooncake.py completes at its default batches on the test services' store.

The test services mount a 256 MB segment: the benchmark must fit what it writes into it (it used
to keep every variant's batch of 128 x 512 KiB pages at once, and stopped with "staged_set failed").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import run_json, services_env

pytestmark = [pytest.mark.timeout(300), pytest.mark.services]


def test_bench_mooncake_completes_at_batch_128(tmp_path: Path) -> None:
    env = services_env("mooncake")
    result = run_json("bench_mooncake.py", "--repeat", "1", out=tmp_path / "result.json", env=env, timeout_s=280)
    assert set(result["batches"]) == {"32", "128"}
    for row in result["batches"].values():
        for variant in ("ours", "nohash", "staged"):
            assert row[f"{variant}_set_ratio"] > 0 and row[f"{variant}_get_ratio"] > 0
