from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_storage.cli.bench import OpResult, _pool, _ratios, run_bench
from hicache_storage.cli.commands import run
from hicache_storage.config import make_config
from hicache_storage.pools import BatchContext
from hicache_storage.registry import load_backend, register_backend, unregister_backend

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


def test_bench_leaves_no_pages_behind() -> None:
    result = run_bench("sim", {"store": "bench-cleanup"}, page_bytes=4096, pages=16, batch=8)
    assert result["byte_exact"] and result["sdk"]["set"]["ok"] == 16
    after = load_backend(sim.SimBackend, make_config("bench", extra_config={"store": "bench-cleanup"}))
    try:
        after.register_mem_pool_host(_pool(4096, 16))  # the bench's pool shape: the same key space
        keys = [hashlib.sha256(f"bench-{i}".encode()).hexdigest() for i in range(16)]
        assert after.batch_exists(keys) == 0
    finally:
        after.close()


class _HollowReads(sim.SimBackend):  # type: ignore[misc,name-defined]
    """Claims every read succeeded without bringing any bytes back."""

    def read_pages(self, keys: Any, pages: Any, context: BatchContext) -> list[bool]:
        return [True] * len(keys)


def test_bench_byte_check_catches_reads_that_bring_nothing_back() -> None:
    register_backend("sim-hollow", _HollowReads, replace=True)
    try:
        result = run_bench("sim-hollow", page_bytes=4096, pages=16, batch=8)
    finally:
        unregister_backend("sim-hollow")
    assert result["sdk"]["get"]["ok"] == 16 and result["byte_exact"] is False


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


class _RawDictBaseline(_RawDict):
    @classmethod
    def from_options(cls, options: Any, timeout_s: float) -> _RawDict:
        return cls()


class _WithBaseline(sim.SimBackend):  # type: ignore[misc,name-defined]
    raw_baseline_class = _RawDictBaseline


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


# --- fairness of the SDK / raw comparison -------------------------------------------------------

Log = list[tuple[str, str, tuple[str, ...]]]


class _RawLogged(_RawDict):
    """Records every call in ``log``; sleeps ``pause`` per call, or ``slow`` on raw call number ``slow_call``."""

    def __init__(self, log: Log, pause: float = 0.0, slow_call: int | None = None, slow: float = 0.0) -> None:
        super().__init__()
        self.log, self.pause, self.slow_call, self.slow, self.calls = log, pause, slow_call, slow, 0

    def _enter(self, op: str, keys: list[str]) -> None:
        self.log.append(("raw", op, tuple(keys)))
        time.sleep(self.slow if self.calls == self.slow_call else self.pause)
        self.calls += 1

    def set(self, keys: list[str], buffers: list[memoryview]) -> list[bool]:
        self._enter("set", keys)
        return super().set(keys, buffers)

    def get(self, keys: list[str], buffers: list[memoryview]) -> list[bool]:
        self._enter("get", keys)
        return super().get(keys, buffers)

    def exists(self, keys: list[str]) -> int:
        self._enter("exists", keys)
        return super().exists(keys)


@pytest.fixture
def logged_backend() -> Iterator[Callable[..., Log]]:
    """Registers ``sim-logged``: a sim backend and a ``_RawLogged`` raw client sharing one call log."""

    def register(**raw_options: Any) -> Log:
        log: Log = []

        class RawLogged(_RawLogged):
            @classmethod
            def from_options(cls, options: Any, timeout_s: float) -> _RawLogged:
                return _RawLogged(log, **raw_options)

        def note(op: str, keys: Any, context: BatchContext) -> None:
            if context.record_bytes is None:  # pages, not the key space's manifest
                log.append(("sdk", op, tuple(key.split(".")[1] for key in keys)))

        class Logged(sim.SimBackend):  # type: ignore[misc,name-defined]
            raw_baseline_class = RawLogged

            def write_pages(self, keys: Any, pages: Any, context: BatchContext) -> list[bool]:
                note("set", keys, context)
                return super().write_pages(keys, pages, context)  # type: ignore[no-any-return]

            def read_pages(self, keys: Any, pages: Any, context: BatchContext) -> list[bool]:
                note("get", keys, context)
                return super().read_pages(keys, pages, context)  # type: ignore[no-any-return]

            def pages_exist(self, keys: Any, context: BatchContext) -> list[bool]:
                note("exists", keys, context)
                return super().pages_exist(keys, context)  # type: ignore[no-any-return]

        register_backend("sim-logged", Logged, replace=True)
        return log

    yield register
    unregister_backend("sim-logged")


# The sim backend really sleeps 5 ms a call; the raw client sleeps 5 ms a call: steady-state ratio ~1.
_SLEEPY_SIM = {"sleep": True, "sim_op_latency_us": 5000, "sim_write_gbps": 1000}


def test_bench_warms_up_both_sides_then_alternates_batch_by_batch(logged_backend: Callable[..., Log]) -> None:
    log = logged_backend()
    result = run_bench("sim-logged", page_bytes=2048, pages=24, batch=8)
    assert result["byte_exact"] and result["warm_up_pages"] == 8
    ops = ("set", "exists", "get")
    warm, timed = log[:6], log[6:]
    # warm-up: one set, exists and get per side, on keys the timed run never uses
    assert [(side, op) for side, op, _ in warm] == [(side, op) for side in ("sdk", "raw") for op in ops]
    warm_keys = {key for *_, keys in warm for key in keys}
    assert len(warm_keys) == 8 and not warm_keys & {key for *_, keys in timed for key in keys}
    # then 3 batches per op, each an SDK call and a raw call of the same pages back to back
    assert len(timed) == 2 * 3 * 3
    firsts, seconds = timed[0::2], timed[1::2]
    assert all(a[1:] == b[1:] and {a[0], b[0]} == {"sdk", "raw"} for a, b in zip(firsts, seconds, strict=True))
    assert [op for _, op, _ in firsts] == [op for op in ops for _ in range(3)]
    # which side goes first alternates from pair to pair, across operations too
    assert [side for side, _, _ in firsts] == ["sdk", "raw"] * 4 + ["sdk"]
    for op in ops:
        assert result["sdk"][op]["calls"] == result["raw"][op]["calls"] == 3
        assert result["sdk"][op]["ok"] == result["raw"][op]["ok"] == 24


def test_bench_slow_first_raw_call_is_absorbed_by_warm_up(logged_backend: Callable[..., Log]) -> None:
    logged_backend(pause=0.005, slow_call=0, slow=0.3)
    result = run_bench("sim-logged", _SLEEPY_SIM, page_bytes=2048, pages=40, batch=8)
    for op in ("set", "exists", "get"):
        assert result["raw"][op]["p99_ms"] < 100, op  # the 300 ms call was not timed
        assert 0.5 < result["ratio_ours_over_raw"][op] < 2.0, (op, result["ratio_ours_over_raw"])
        assert 0.5 < result["ratio_of_totals"][op] < 2.0, (op, result["ratio_of_totals"])


def test_bench_ratio_is_a_median_of_batch_pairs(logged_backend: Callable[..., Log]) -> None:
    # raw calls 0-2 are the warm-up, 3-7 the timed sets: the second timed set takes 300 ms
    logged_backend(pause=0.005, slow_call=4, slow=0.3)
    result = run_bench("sim-logged", _SLEEPY_SIM, page_bytes=2048, pages=40, batch=8)
    assert result["raw"]["set"]["p99_ms"] >= 250
    assert 0.5 < result["ratio_ours_over_raw"]["set"] < 2.0, result["ratio_ours_over_raw"]
    assert result["ratio_of_totals"]["set"] > 3.0, result["ratio_of_totals"]


def test_ratios_median_over_pairs_and_ratio_of_totals() -> None:
    sdk = {op: OpResult(op, 4, 0, latencies=[1.0, 2.0, 1.0, 1.0]) for op in ("set", "exists", "get")}
    raw = {op: OpResult(op, 4, 0, latencies=[1.0, 2.0, 2.0, 20.0]) for op in ("set", "exists", "get")}
    median, totals = _ratios(sdk, raw)
    assert median["get"] == pytest.approx(1.5)  # pair ratios 1, 1, 2, 20
    assert totals["get"] == pytest.approx(25.0 / 5.0)


@pytest.mark.parametrize("name", ["file", "slab", "sim", "redis", "s3", "fsspec"])
def test_bench_leaves_nothing_behind_on_any_backend(tmp_path: Path, name: str) -> None:
    """Nothing the run wrote stays: no page, manifest, raw-baseline file, directory or key."""
    from operate_support import fill, options_for, store_contents

    options = options_for(name, tmp_path)
    fill(name, options)
    before = store_contents(name, options)
    result = run_bench(name, options, page_bytes=4096, pages=40, batch=16)
    assert result["byte_exact"]
    assert store_contents(name, options) == before


def test_bench_removes_the_store_directory_it_had_to_create(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    assert run_bench("file", {"path": str(root)}, page_bytes=4096, pages=16, batch=8)["byte_exact"]
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_a_backend_that_could_not_remove_its_pages(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    class NoClear(sim.SimBackend):  # type: ignore[misc, name-defined]
        capabilities = dataclasses.replace(sim.SimBackend.capabilities, supports_clear=False)

        @classmethod
        def capabilities_for(cls, options: Any) -> Any:
            return cls.capabilities

    register_backend("bench-no-clear", NoClear)
    try:
        assert run(["bench", "bench-no-clear", "--config", '{"store": "bench-no-clear"}', "--pages", "8"]) == 2
    finally:
        unregister_backend("bench-no-clear")
    err = capsys.readouterr().err
    assert "cannot remove the pages it was given (clear)" in err and len(err.strip().splitlines()) == 1
    assert sim.store.open_store("bench-no-clear", None, False).keys() == []  # refused before any write
