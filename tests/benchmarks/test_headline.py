"""benchmarks/headline.sh completes on a small conversation trace, every replay and plot written."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from bench_support import run_script

pytestmark = pytest.mark.timeout(300)

BLOCK = 512  # tokens per trace block (the replay's default)


def write_conversations(path: Path, conversations: int = 8, turns: int = 3, seed: int = 3) -> Path:
    """A Mooncake-style trace: multi-turn conversations whose turns repeat the previous prompt's blocks."""
    rng = random.Random(seed)
    fresh = iter(range(1, 10**9))
    history = [[0] for _ in range(conversations)]
    lines = []
    for _ in range(turns):
        for number in rng.sample(range(conversations), conversations):
            ids = [*history[number], *(next(fresh) for _ in range(rng.randint(1, 4)))]
            stamp = 1000 * len(lines)
            length = (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)
            lines.append(json.dumps({"timestamp": stamp, "input_length": length, "output_length": 8, "hash_ids": ids}))
            history[number] = ids[:-1]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_headline_writes_every_replay(tmp_path: Path) -> None:
    trace = write_conversations(tmp_path / "trace.jsonl")
    out, img = tmp_path / "results", tmp_path / "img"
    env = {
        "TRACE": str(trace),
        "REQUESTS": "24",
        "FILE_REQUESTS": "12",
        "HYBRID_REQUESTS": "12",
        "DEVICE_TOKENS": "65536",
        "OUT": str(out),
        "IMG": str(img),
        "CLI": str(Path(sys.executable).with_name("hicache-storage")),
        "TMPDIR": str(tmp_path),
    }
    run_script("headline.sh", env=env, timeout_s=280)
    names = ["sim", "sim-model-io", "file", "hybrid", "hybrid-checkpoint-0", "hybrid-checkpoint-2048"]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"headline-{name}.json" for name in names)
    for name in names:
        result = json.loads((out / f"headline-{name}.json").read_text())
        modes = [row["mode"] for row in result["results"]]
        assert modes == (["none"] if "checkpoint" in name else ["none", "cache", "buffer_only"])
        assert all(row["corrupt_pages"] == 0 for row in result["results"])
    assert any(img.iterdir()), "no plot was written"
    assert {p.name for p in tmp_path.iterdir()} == {"trace.jsonl", "results", "img"}, "the file backend's data stayed"
