from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hicache_storage.bench import run_bench
from hicache_storage.commands import run
from hicache_storage.registry import register_backend, unregister_backend

sim = pytest.importorskip("hicache_storage_sim")


def test_bench_sim_reports_sane_numbers() -> None:
    result = run_bench("sim", page_bytes=4096, pages=64, batch=16)
    assert result["byte_exact"] and result["raw"] is None and result["ratio_ours_over_raw"] is None
    for op in ("set", "exists", "get"):
        row = result["sdk"][op]
        assert row["calls"] == 4 and row["pages"] == 64 and row["ok"] == 64
        assert 0 < row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
        assert row["pages_per_s"] > 0
    assert result["sdk"]["set"]["gb_per_s"] > 0 and result["sdk"]["exists"]["gb_per_s"] == 0
    # sim cost model: clear + 12 batch calls, 100 us each, + 2 x 64 pages x 4096 B at 5 GB/s
    assert result["modelled_seconds"] == pytest.approx(13 * 100e-6 + 2 * 64 * 4096 / 5e9)


class _RawDict:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, keys: list[str], buffers: list[memoryview]) -> list[bool]:
        self.data.update((k, bytes(b)) for k, b in zip(keys, buffers, strict=True))
        return [True] * len(keys)

    def get(self, keys: list[str], buffers: list[memoryview]) -> list[bool]:
        for key, buffer in zip(keys, buffers, strict=True):
            buffer[:] = self.data[key]
        return [True] * len(keys)

    def exists(self, keys: list[str]) -> int:
        return sum(k in self.data for k in keys)


class _WithBaseline(sim.SimBackend):  # type: ignore[misc,name-defined]
    @staticmethod
    def raw_baseline(config: Any) -> _RawDict:
        return _RawDict()


def test_bench_compares_with_raw_baseline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register_backend("sim-with-raw", _WithBaseline, replace=True)
    try:
        out = tmp_path / "b.json"
        args = ["bench", "sim-with-raw", "--page-bytes", "2048", "--pages", "32", "--batch", "8", "--json", str(out)]
        assert run(args) == 0
    finally:
        unregister_backend("sim-with-raw")
    result = json.loads(out.read_text())
    assert result["raw"]["get"]["ok"] == 32
    assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
    assert "no raw baseline" not in capsys.readouterr().out


def test_bench_cli_without_baseline_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "sim", "--page-bytes", "2048", "--pages", "16", "--batch", "8"]) == 0
    assert "no raw baseline" in capsys.readouterr().out


def test_bench_rejects_bad_page_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "sim", "--page-bytes", "100"]) == 2
    assert "--page-bytes" in capsys.readouterr().err
