from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from replay_support import DEVICE_TOKENS, INPUT_TOKENS, PAGE, synthetic_requests

from hicache_storage.pools import BatchContext
from hicache_storage.replay.engine import EngineConfig, ModelShape, run_replay
from hicache_storage.replay.trace import TraceRequest

pytest.importorskip("hicache_storage_sim")

# (device, host, storage) hit tokens per mode, known by construction (see replay_support.SYNTHETIC).
EXPECTED = {"none": (0, 0, 0), "cache": (0, 16, 16), "buffer_only": (0, 0, 32)}
PAGE_BYTES = 2 * 8 * PAGE  # ModelShape(1, 1, 8, "uint8")


def config(mode: str, **overrides: Any) -> EngineConfig:
    values: dict[str, Any] = {
        "mode": mode,
        "device_tokens": DEVICE_TOKENS,
        "page_size": PAGE,
        "block_tokens": 8,
        "shape": ModelShape(1, 1, 8, "uint8"),
        "prefill_tokens_per_s": 1000.0,
        **overrides,
    }
    return EngineConfig(**values)


def backends(tmp_path: Path) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = [("sim", {})]
    try:
        import hicache_storage_file  # noqa: F401
    except ImportError:
        return found
    return [*found, ("file", {"path": str(tmp_path / "pages")})]


@pytest.mark.parametrize("mode", ["none", "cache", "buffer_only"])
def test_synthetic_trace_hits_by_tier(mode: str, tmp_path: Path) -> None:
    for backend, options in backends(tmp_path):
        result = run_replay(synthetic_requests(), config(mode), None if mode == "none" else backend, options)
        hits = result.hit_tokens
        assert (hits["device"], hits["host"], hits["storage"]) == EXPECTED[mode], backend
        assert result.input_tokens == INPUT_TOKENS
        assert result.recomputed_tokens == INPUT_TOKENS - sum(EXPECTED[mode])
        assert result.oracle_hit_tokens == 32
        assert result.corrupt_pages == 0
        if mode != "none":
            assert result.io["bytes_written"] == 16 * PAGE_BYTES  # every computed page once
            assert result.io["bytes_read"] == EXPECTED[mode][2] // PAGE * PAGE_BYTES
            assert not result.gate_drops


def test_ttft_is_recompute_plus_load_io() -> None:
    result = run_replay(synthetic_requests(), config("buffer_only"), "sim", {"sim_op_latency_us": 1000.0})
    last = result.records[-1]
    assert last.storage_tokens == 16 and last.recomputed_tokens == 0
    assert last.io_seconds >= 0.002  # one exists call and one get call of 1 ms each
    assert last.ttft_seconds == pytest.approx(last.io_seconds)
    # a miss still pays its existence lookup
    assert result.records[0].ttft_seconds == pytest.approx(16 / 1000.0 + 0.001)


def test_device_hits_and_partial_last_block() -> None:
    requests = [TraceRequest(0, 1, 0.0, 16, 1, (0, 1)), TraceRequest(1, 2, 1.0, 22, 1, (0, 1, 2))]
    result = run_replay(requests, config("none", device_tokens=64), None)
    second = result.records[1]
    assert (second.device_tokens, second.recomputed_tokens) == (16, 6)


def test_corrupt_pages_are_detected_and_recomputed() -> None:
    from hicache_storage_sim import SimBackend

    from hicache_storage.registry import register_backend, unregister_backend

    class Corrupting(SimBackend):
        def read_pages(self, keys: Any, pages: Any, context: BatchContext) -> list[bool]:
            results = super().read_pages(keys, pages, context)
            for page in pages:
                page[0][0] ^= 0xFF
            return results

    register_backend("corrupting-sim", Corrupting, replace=True)
    try:
        result = run_replay(synthetic_requests(), config("buffer_only"), "corrupting-sim")
    finally:
        unregister_backend("corrupting-sim")
    assert result.corrupt_pages == 8 and result.hit_tokens["storage"] == 0


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        config("tiered")
    with pytest.raises(ValueError, match="needs --backend"):
        run_replay(synthetic_requests(), config("cache"), None)
    with pytest.raises(ValueError, match="even"):
        ModelShape.from_bytes_per_token(3)
    assert ModelShape.parse("2,4,8,bfloat16").pool_kwargs()["layer_num"] == 2
