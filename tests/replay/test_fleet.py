"""``replay --fleet``: deployments of several TP sizes over one store, head shards off and on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_storage.cli.commands import run
from hicache_storage.replay import EngineConfig, ModelShape, read_trace
from hicache_storage.replay.fleet import Deployment, fleet_lcm, parse_fleet, run_fleet


def write_trace(path: Path) -> Path:
    """Four requests of one 4-block prefix: two land on TP2 replicas, then one on TP4, one on TP2 again."""
    rows = [{"timestamp": i, "input_length": 2048, "output_length": 8, "hash_ids": [1, 2, 3, 4]} for i in range(4)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_parse_fleet_and_its_lcm():
    fleet = parse_fleet("tp2:2, tp4:1")
    assert fleet == [Deployment(2, 2), Deployment(4, 1)] and fleet_lcm(fleet) == 4
    assert fleet_lcm(parse_fleet("tp2:1,tp3:1")) == 6
    with pytest.raises(ValueError, match="expected tp<SIZE>:<REPLICAS>"):
        parse_fleet("tp2:2,4")


@pytest.mark.parametrize("share", [False, True])
def test_tp4_replica_reads_tp2_pages_only_with_head_shards(tmp_path, share):
    requests = read_trace(write_trace(tmp_path / "trace.jsonl"), block_tokens=512)
    config = EngineConfig(device_tokens=4096, page_size=64, shape=ModelShape(2, 8, 8, "bfloat16"))
    fleet = parse_fleet("tp2:2,tp4:1")
    result = run_fleet(requests, config, fleet, "sim", {"store": f"fleet-{share}", "sleep": False}, share=share)
    tp4, tp2 = result["by_tp"]["tp4"], result["by_tp"]["tp2"]
    assert tp4["requests"] == 1 and tp2["requests"] == 3
    assert tp2["storage_hit_rate"] > 0  # the second TP2 replica reads what the first wrote, either way
    assert (tp4["storage_hit_rate"] > 0) is share
    assert result["tp_lcm_size"] == (4 if share else None)


def test_fleet_needs_heads_divisible_by_the_lcm(tmp_path):
    requests = read_trace(write_trace(tmp_path / "trace.jsonl"), block_tokens=512)
    config = EngineConfig(device_tokens=4096, page_size=64, shape=ModelShape(2, 2, 8, "bfloat16"))
    with pytest.raises(ValueError, match=r"KV heads \(2\) to divide by .* \(4\)"):
        run_fleet(requests, config, parse_fleet("tp4:1"), "sim", {}, share=True)


def test_replay_command_reports_both_runs(tmp_path):
    out = tmp_path / "fleet.json"
    argv = ["replay", str(write_trace(tmp_path / "trace.jsonl")), "--backend", "file"]
    argv += ["--config", json.dumps({"path": str(tmp_path / "store")}), "--fleet", "tp2:2,tp4:1"]
    argv += ["--model-shape", "2,8,8,bfloat16", "--device-tokens", "4096", "--json", str(out)]
    assert run(argv) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [run["share"] for run in runs] == [False, True]
    assert runs[0]["by_tp"]["tp4"]["storage_hit_rate"] == 0 < runs[1]["by_tp"]["tp4"]["storage_hit_rate"]
