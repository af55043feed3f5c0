from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_support import write_trace

from hicache_storage.cli.commands import run

pytest.importorskip("hicache_storage_sim")


def test_replay_cli_writes_table_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    trace = write_trace(tmp_path / "t.jsonl")
    args = ["replay", str(trace), "--backend", "sim", "--page-size", "4", "--block-tokens", "8"]
    args += ["--device-tokens", "16", "--bytes-per-token", "16", "--json", str(tmp_path / "r.json")]
    args += ["--plot", str(tmp_path / "img"), "--mode", "none,cache", "--mode", "buffer_only"]
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "oracle ceiling" in out and "33.3% of 12 input blocks" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert [r["mode"] for r in data["results"]] == ["none", "cache", "buffer_only"]
    assert data["results"][1]["hit_tokens"] == {"device": 0, "host": 16, "storage": 16}
    assert set(data["results"][2]["ttft_seconds"]) == {"p50", "p90", "p99"}
    assert (tmp_path / "img" / "replay-hit-rate.png").stat().st_size > 1000
    assert (tmp_path / "img" / "replay-ttft-cdf.png").stat().st_size > 1000


def test_replay_cli_reports_malformed_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "t.jsonl")
    trace.write_text(trace.read_text() + '{"timestamp": 1, "input_length": 8, "output_length": 1}\n')
    assert run(["replay", str(trace), "--block-tokens", "8", "--page-size", "4"]) == 2
    err = "".join(capsys.readouterr().err.split())  # the console may wrap the message
    assert "t.jsonl:7:missingfield'hash_ids'" in err


def test_replay_cli_rejects_unknown_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "t.jsonl")
    assert run(["replay", str(trace), "--mode", "tiered"]) == 2
    assert "unknown mode 'tiered'" in capsys.readouterr().err


def test_replay_cli_with_a_hybrid_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    trace = write_trace(tmp_path / "t.jsonl")
    args = ["replay", str(trace), "--backend", "sim", "--page-size", "4", "--block-tokens", "8"]
    args += ["--device-tokens", "16", "--bytes-per-token", "16", "--model", "mamba-hybrid", "--checkpoint-tokens", "8"]
    args += ["--model-io-gbps", "5", "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "img")]
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "model mamba-hybrid" in " ".join(out.split()) and "lost: sidecar missing" in out
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["model"]["name"] == "mamba-hybrid" and data["model"]["checkpoint_tokens"] == 8
    # The sim's bandwidth is scaled so the real bytes cost what the model's do at 5 GB/s.
    assert data["backend_options"]["sim_write_gbps"] == pytest.approx(5.0 * 16 / 24_576)
    buffer_only = data["results"][2]
    assert buffer_only["mode"] == "buffer_only" and buffer_only["components"]["mamba"]["units_from_storage"] > 0
    assert buffer_only["hit_tokens"]["storage"] == 32 and buffer_only["corrupt_pages"] == 0
    assert buffer_only["model_bytes_read"] == pytest.approx(buffer_only["io"]["bytes_read"] * 24_576 / 16)
    assert set(buffer_only["ttft_ms"]) == {"p50", "p90", "p99"}
    assert (tmp_path / "img" / "replay-components.png").stat().st_size > 1000


def test_replay_cli_model_file_and_bad_model_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path / "t.jsonl")
    model = tmp_path / "model.json"
    model.write_text(
        '{"kv_bytes_per_token": 1024, "checkpoint_tokens": 8, "sidecars": [{"kind": "mamba", "temporal_bytes": 4096}]}'
    )
    base = ["replay", str(trace), "--page-size", "4", "--block-tokens", "8", "--device-tokens", "16"]
    assert run([*base, "--backend", "sim", "--mode", "buffer_only", "--model", str(model)]) == 0
    assert "model model" in " ".join(capsys.readouterr().out.split())
    assert run([*base, "--checkpoint-tokens", "8"]) == 2
    assert "need --model" in capsys.readouterr().err
    assert run([*base, "--model", "gpt-9"]) == 2
    assert "not a preset" in capsys.readouterr().err
    assert run([*base, "--backend", "file", "--config", "{}", "--model", "dense", "--model-io-gbps", "5"]) == 2
    assert "needs --backend sim" in capsys.readouterr().err
