"""A synthetic trace whose hits per tier are known by construction (page 4 tokens, blocks of 8)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from hicache_storage.replay.trace import TraceRequest

PAGE = 4
BLOCK = 8
DEVICE_TOKENS = 16  # 4 pages: one request of two full blocks

# Device holds one request; cache-mode host holds two (ratio 2.0).
# r2 repeats r0 after r1 evicted it from the device: a host hit in cache mode, a storage hit in
# buffer_only. r5 repeats r1 after r3 and r4 pushed it out of the host too: a storage hit in both.
SYNTHETIC = [
    [0, 1],
    [2, 3],
    [0, 1],
    [4, 5],
    [6, 7],
    [2, 3],
]
INPUT_TOKENS = 16 * len(SYNTHETIC)


def synthetic_requests() -> list[TraceRequest]:
    return [TraceRequest(i, i + 1, 1000.0 * i, 16, 1, tuple(ids)) for i, ids in enumerate(SYNTHETIC)]


def write_trace(path: Path, rows: list[list[int]] | None = None) -> Path:
    lines = [
        json.dumps({"timestamp": 1000 * i, "input_length": BLOCK * len(ids), "output_length": 1, "hash_ids": ids})
        for i, ids in enumerate(rows or SYNTHETIC)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def conversation_rows(conversations: int = 12, turns: int = 6, seed: int = 1) -> list[tuple[list[int], int]]:
    """Multi-turn conversations like the Mooncake trace's, as (block ids, input length) rows.

    Every prompt starts with the shared block 0; each turn repeats the previous prompt's full
    blocks (its partial last block comes back as a new block) and adds one to three blocks; the
    conversations' turns interleave.
    """
    rng = random.Random(seed)
    fresh = iter(range(1, 10**9))
    history = [[0] for _ in range(conversations)]
    rows: list[tuple[list[int], int]] = []
    for _ in range(turns):
        order = list(range(conversations))
        rng.shuffle(order)
        for number in order:
            ids = [*history[number], *(next(fresh) for _ in range(rng.randint(1, 3)))]
            rows.append((ids, (len(ids) - 1) * BLOCK + rng.randint(1, BLOCK)))
            history[number] = ids[:-1]
    return rows


def conversation_requests(**kwargs: int) -> list[TraceRequest]:
    rows = conversation_rows(**kwargs)
    return [TraceRequest(i, i + 1, 500.0 * i, length, 1, tuple(ids)) for i, (ids, length) in enumerate(rows)]
