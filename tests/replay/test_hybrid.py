"""Replay of hybrid models: presets, the hybrid oracle, every mode against it, sidecar bytes checked, TTFT."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from replay_support import BLOCK, PAGE, conversation_requests

from hicache_storage.pools import BatchContext
from hicache_storage.replay.engine import EngineConfig, ModelShape, run_replay
from hicache_storage.replay.models import PRESETS, ModelPreset, SidecarSpec
from hicache_storage.replay.oracle import oracle_hybrid
from hicache_storage.replay.pages import PageHasher
from hicache_storage.replay.sidecars import build_components
from hicache_storage.replay.trace import TraceRequest, read_trace

pytest.importorskip("hicache_storage_sim")

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "conversation_trace.jsonl"
#: A small Mamba hybrid for synthetic traces: a state every block (8 tokens = 2 pages of 4).
TINY_MAMBA = ModelPreset(
    "tiny-mamba",
    kv_bytes_per_token=1024,
    sidecars=(SidecarSpec("mamba", temporal_bytes=30 * 1024, conv_bytes=2 * 1024),),
    checkpoint_tokens=BLOCK,
)
TINY_SWA = ModelPreset(
    "tiny-swa",
    kv_bytes_per_token=1024,
    sidecars=(SidecarSpec("swa", bytes_per_token=512, window_tokens=6, device_memory_ratio=0.8),),
    checkpoint_tokens=BLOCK,
)
TINY_BOTH = replace(TINY_MAMBA, name="tiny-both", sidecars=(*TINY_MAMBA.sidecars, *TINY_SWA.sidecars))


def config(mode: str, model: ModelPreset, **overrides: Any) -> EngineConfig:
    values: dict[str, Any] = {
        "mode": mode,
        "device_tokens": 64,
        "page_size": PAGE,
        "block_tokens": BLOCK,
        "shape": ModelShape.from_bytes_per_token(16),
        "prefill_tokens_per_s": 1000.0,
        "model": model,
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


def test_presets_carry_model_sizes_and_real_bytes_scale_alike() -> None:
    assert PRESETS["dense"].kv_bytes_per_token == 131_072 and not PRESETS["dense"].hybrid
    assert PRESETS["mla"].kv_bytes_per_token == 70_272 and PRESETS["mla"].is_mla
    swa = PRESETS["swa-hybrid"].sidecars[0]
    assert (swa.kind, swa.window_pages(64), swa.unit_model_bytes(64)) == ("swa", 2, 36_864 * 64)
    state = PRESETS["mamba-hybrid"].sidecars[0]
    assert state.unit_model_bytes(64) == 77_266_944 and state.window_pages(64) == 1
    geometry = config("none", PRESETS["mamba-hybrid"], page_size=64, device_tokens=1 << 20).geometry()
    assert geometry is not None
    side = geometry.sidecars[0]
    assert side.real_unit_bytes == round(77_266_944 * 16 / 24_576)  # scaled like the 16-byte KV tokens
    assert side.device_units == int(0.9 * (1 << 20) * 24_576 // 77_266_944)  # SGLang's mamba_full_memory_ratio
    assert geometry.device_checkpoints == side.device_units and geometry.checkpoint_pages == 8
    components = build_components(geometry)
    assert [c.name for c in components] == ["mamba"] and components[0].unit_bytes == side.real_unit_bytes


def test_model_from_a_json_file_and_bad_geometries(tmp_path: Path) -> None:
    from hicache_storage.replay.models import load_model

    path = tmp_path / "m.json"
    path.write_text(
        '{"name": "mine", "kv_bytes_per_token": 4096, "checkpoint_tokens": 256, '
        '"sidecars": [{"kind": "swa", "bytes_per_token": 2048, "window_tokens": 1024}]}'
    )
    model = load_model(str(path))
    assert model.name == "mine" and model.sidecars[0].window_pages(64) == 16
    assert load_model("mamba-hybrid", checkpoint_tokens=0).checkpoint_tokens == 0
    for text, message in [
        ('{"kv_bytes_per_token": 1, "layers": 3}', "unknown model fields"),
        ('{"sidecars": []}', "missing model field"),
        ('{"kv_bytes_per_token": 8, "sidecars": [{"kind": "lstm"}]}', "sidecar kind"),
        ('{"kv_bytes_per_token": 8, "sidecars": [{"kind": "swa", "bytes_per_token": 2}]}', "window_tokens"),
    ]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_model(str(path))
    with pytest.raises(ValueError, match="not a preset"):
        load_model("gpt-9")


def _requests(rows: list[tuple[list[int], int]]) -> list[TraceRequest]:
    return [TraceRequest(i, i + 1, float(i), length, 1, tuple(ids)) for i, (ids, length) in enumerate(rows)]


def test_hybrid_oracle_counts_a_prefix_only_where_the_state_was_kept() -> None:
    # B shares A's first two blocks (4 pages); A's state is kept at its end only, or every block.
    requests = _requests([([0, 1, 2], 24), ([0, 1, 5], 24), ([0, 1, 2], 24)])
    hasher = PageHasher(PAGE, BLOCK)
    geometry = config("none", TINY_MAMBA).geometry()
    assert geometry is not None
    components = build_components(geometry)
    ends_only = oracle_hybrid(requests, hasher, None, components, checkpoint_pages=0)
    assert (ends_only.kv_hits, ends_only.hits) == (16 + 24, 24)  # B loses its 16 tokens, A again hits all
    assert ends_only.lost_by_component == {"mamba": 16}
    every_block = oracle_hybrid(requests, hasher, None, components, checkpoint_pages=2)
    assert every_block.hits == every_block.kv_hits == 40
    # An SWA window of 2 pages needs both pages before the prefix end.
    swa_geometry = config("none", TINY_SWA).geometry()
    assert swa_geometry is not None
    swa = oracle_hybrid(requests, hasher, None, build_components(swa_geometry), checkpoint_pages=0)
    assert swa.hits == 24 and swa.kv_hits == 40


def test_device_hits_need_a_state_and_losses_are_counted() -> None:
    requests = _requests([([0, 1, 2], 24), ([0, 1, 5], 24)])
    ends_only = replace(TINY_MAMBA, checkpoint_tokens=0)
    result = run_replay(requests, config("none", ends_only, device_tokens=256), None)
    second = result.records[1]
    assert (second.device_tokens, second.lost_tokens, second.recomputed_tokens) == (0, 16, 24)
    assert result.lost_tokens == 16 and result.oracle_hit_tokens == 0 and result.oracle_kv_hit_tokens == 16
    kept = run_replay(requests, config("none", TINY_MAMBA, device_tokens=256), None)
    assert kept.records[1].device_tokens == 16 and kept.lost_tokens == 0


HYBRIDS = [
    replace(PRESETS["mamba-hybrid"], checkpoint_tokens=BLOCK),  # the trace's blocks are 8 tokens here
    replace(PRESETS["swa-hybrid"], checkpoint_tokens=BLOCK),
    TINY_BOTH,
    replace(TINY_MAMBA, name="tiny-mamba-12", checkpoint_tokens=12),  # states off the blocks: prefixes are lost
    replace(TINY_MAMBA, name="tiny-mamba-ends", checkpoint_tokens=0),  # states at the ends of computed runs only
]


@pytest.mark.parametrize("model", HYBRIDS, ids=lambda m: m.name)
def test_buffer_only_reaches_the_hybrid_oracle_with_every_byte_checked(model: ModelPreset, tmp_path: Path) -> None:
    requests = conversation_requests(conversations=10, turns=5)
    for backend, options in backends(tmp_path):
        results = {
            mode: run_replay(requests, config(mode, model), backend, options) for mode in ("cache", "buffer_only")
        }
        buffer_only = results["buffer_only"]
        oracle = buffer_only.oracle_hit_tokens
        assert oracle > 0.3 * buffer_only.input_tokens, backend
        assert buffer_only.total_hit_tokens >= 0.9 * oracle, (backend, buffer_only.hit_tokens, oracle)
        assert buffer_only.hit_tokens["storage"] > buffer_only.hit_tokens["device"]
        for result in results.values():
            assert result.total_hit_tokens <= oracle
            assert result.corrupt_pages == 0 and result.corrupt_units == 0
            loaded = sum(row["units_from_storage"] + row["units_from_host"] for row in result.sidecars.values())
            assert loaded > 0
        assert buffer_only.io["bytes_read"] > buffer_only.hit_tokens["storage"] * 16  # KV and sidecar bytes


@pytest.mark.skipif(not TRACE.exists(), reason="conversation trace not present")
def test_conversation_trace_buffer_only_reaches_the_hybrid_oracle() -> None:
    requests = read_trace(TRACE, limit=160)
    overrides: dict[str, Any] = {"device_tokens": 32_768, "page_size": 128, "block_tokens": 512}
    overrides["shape"] = ModelShape.from_bytes_per_token(8)
    result = run_replay(requests, config("buffer_only", PRESETS["mamba-hybrid"], **overrides), "sim")
    assert result.corrupt_pages == 0 and result.corrupt_units == 0
    assert result.oracle_hit_tokens > 0.03 * result.input_tokens and result.hit_tokens["storage"] > 0
    assert result.oracle_hit_tokens >= result.total_hit_tokens >= 0.9 * result.oracle_hit_tokens


def test_corrupt_sidecar_units_are_detected_and_recomputed() -> None:
    from hicache_storage_sim import SimBackend

    from hicache_storage.registry import register_backend, unregister_backend

    class CorruptState(SimBackend):  # type: ignore[misc]
        def read_pages(self, keys: Any, pages: Any, context: BatchContext) -> list[bool]:
            results: list[bool] = super().read_pages(keys, pages, context)
            if context.pool == "mamba":
                for page in pages:
                    page[0][0] ^= 0xFF
            return results

    register_backend("corrupt-state-sim", CorruptState, replace=True)
    try:
        requests = conversation_requests(conversations=4, turns=3)
        result = run_replay(requests, config("buffer_only", TINY_MAMBA), "corrupt-state-sim")
        cached = run_replay(requests, config("cache", TINY_MAMBA, host_ratio=0.5), "corrupt-state-sim")
    finally:
        unregister_backend("corrupt-state-sim")
    assert result.corrupt_units > 0 and result.hit_tokens["storage"] == 0 and result.corrupt_pages == 0
    assert cached.corrupt_units > 0


def test_ttft_charges_the_state_bytes_of_a_load() -> None:
    # Model-sized I/O: KV 1 KiB per token and a 32 KiB state, at 1 GB/s and 1 ms per call.
    requests = _requests([([0, 1, 2], 24), ([9, 10, 11], 24), ([0, 1, 2], 24)])  # the second evicts the first
    scale = 16 / TINY_MAMBA.kv_bytes_per_token
    options = {"sim_write_gbps": 1.0 * scale, "sim_op_latency_us": 1000.0}
    result = run_replay(requests, config("buffer_only", TINY_MAMBA, device_tokens=24), "sim", options)
    last = result.records[-1]
    assert (last.device_tokens, last.storage_tokens, last.recomputed_tokens) == (0, 24, 0)
    model_bytes = 24 * 1024 + 32 * 1024  # 6 KV pages and the state at their end
    calls = 4  # batch_exists_v2 (KV, then state) and the two reads (batch_get_v1, batch_get_v2)
    assert last.io_seconds == pytest.approx(model_bytes / 1e9 + calls * 1e-3, rel=0.02)
    assert last.ttft_seconds == pytest.approx(last.io_seconds)
