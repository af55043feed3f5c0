"""Benchmark: a multi-pool (v2) batch against the v1 path on the same bytes, same run, per backend.

One backend instance gets two pools of identical geometry: the KV pool (moved with
``batch_set_v1``/``batch_get_v1``/``batch_exists``) and the same geometry registered as the sidecar
pool ``swa`` (moved with ``batch_set_v2``/``batch_get_v2``; looked up with ``batch_exists_v2`` and a
one-page trailing window, which looks up KV and the sidecar, so its v1 side is two ``batch_exists``).
Both sides move the same page bytes in batches of ``--batch``; the sides alternate which goes first
each round; every read is checked against the written bytes. Prints medians over ``--repeat`` rounds
and the time ratio v2/v1 per page (goal: at most 1.1).

    python benchmarks/bench_multi_pool.py --backends file,sim,redis --repeat 9 [--json out.json]

``redis`` needs the test server (``scripts/services/start.sh``; settings from ``scripts/services/env.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from disk_pages import PAGE_SIZE, make_pool
from machine import describe

from hicache_storage import HiCacheStorage, PoolHitPolicy, PoolTransfer, load_backend, make_config
from hicache_storage.testing import random_keys


def backend_options(name: str, root: str) -> dict[str, Any]:
    if name == "file":
        return {"path": os.path.join(root, "file")}
    if name == "sim":
        return {"sleep": False}
    if name == "redis":
        return {"host": "127.0.0.1", "port": int(os.environ.get("HICACHE_TEST_REDIS_PORT", "16379")), "ttl_s": 600}
    raise SystemExit(f"unknown backend {name!r}; expected file, sim or redis")


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """Raw bytes (random bf16 bytes hold NaNs, which never compare equal as floats)."""
    return tensor.contiguous().view(torch.uint8).clone()


def _exists_twice(storage: HiCacheStorage, keys: list[str]) -> None:
    """What a v2 lookup of KV plus one sidecar costs on the v1 path: two existence lookups."""
    storage.batch_exists(keys)
    storage.batch_exists(keys)


def timed(call: Callable[..., Any], *args: Any) -> float:
    begin = time.perf_counter()
    call(*args)
    return time.perf_counter() - begin


def bench_backend(name: str, batch: int, repeat: int, root: str) -> dict[str, Any]:
    storage: HiCacheStorage = load_backend(name, make_config("bench-v2", extra_config=backend_options(name, root)))
    kv, swa = make_pool(2 * batch, 1), make_pool(2 * batch, 1)  # same bytes in both pools
    storage.register_mem_pool_host(kv)
    storage.register_mem_host_pool_v2(swa, "swa")
    storage.on_host_pools_registered()
    first = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)
    second = first + batch * PAGE_SIZE
    expected = _bytes(kv.kv_buffer[:, : batch * PAGE_SIZE])
    times: dict[str, list[float]] = {f"{op}_{side}": [] for op in ("set", "get", "exists") for side in ("v1", "v2")}
    try:
        for round_number in range(repeat + 1):
            keys = random_keys(batch)
            sides = ["v1", "v2"] if round_number % 2 else ["v2", "v1"]
            for side in sides:
                if side == "v1":
                    times["set_v1"].append(timed(storage.batch_set_v1, keys, first))
                    times["exists_v1"].append(timed(_exists_twice, storage, keys))
                    times["get_v1"].append(timed(storage.batch_get_v1, keys, second))
                    if not torch.equal(_bytes(kv.kv_buffer[:, batch * PAGE_SIZE :]), expected):
                        raise SystemExit(f"{name}: v1 read back other bytes")
                else:
                    put = [PoolTransfer(name="swa", host_indices=first, keys=keys)]
                    query = [PoolTransfer(name="swa", keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
                    get = [PoolTransfer(name="swa", host_indices=second, keys=keys)]
                    times["set_v2"].append(timed(storage.batch_set_v2, put))
                    times["exists_v2"].append(timed(storage.batch_exists_v2, keys, query))
                    times["get_v2"].append(timed(storage.batch_get_v2, get))
                    if not torch.equal(_bytes(swa.kv_buffer[:, batch * PAGE_SIZE :]), expected):
                        raise SystemExit(f"{name}: v2 read back other bytes")
                kv.kv_buffer[:, batch * PAGE_SIZE :].zero_()
                swa.kv_buffer[:, batch * PAGE_SIZE :].zero_()
        if storage.capabilities.supports_clear:
            storage.clear()
    finally:
        storage.close()
    medians = {op: statistics.median(values[1:]) for op, values in times.items()}  # round 0 is a warm-up
    row: dict[str, Any] = {"backend": name, "batch": batch, "page_bytes": kv.bytes_per_page, "rounds": repeat}
    for op in ("set", "get", "exists"):
        row[f"{op}_v1_ms"] = round(medians[f"{op}_v1"] * 1e3, 3)
        row[f"{op}_v2_ms"] = round(medians[f"{op}_v2"] * 1e3, 3)
        row[f"{op}_ratio_v2_over_v1"] = round(medians[f"{op}_v2"] / medians[f"{op}_v1"], 3)
    return row


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="file,sim", help="comma-separated: file, sim, redis")
    parser.add_argument("--batch", type=int, default=32, help="pages per call (512 KiB each)")
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds; medians are reported")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-v2-") as root:
        for name in args.backends.split(","):
            row = bench_backend(name.strip(), args.batch, args.repeat, root)
            rows.append(row)
            cells = [
                f"{op} v1 {row[f'{op}_v1_ms']:.2f} ms v2 {row[f'{op}_v2_ms']:.2f} ms "
                f"(x{row[f'{op}_ratio_v2_over_v1']:.3f})"
                for op in ("set", "get", "exists")
            ]
            print(f"{row['backend']:6} batch {row['batch']}: " + "  ".join(cells))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"rows": rows, "machine": describe()}, out, indent=2)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
