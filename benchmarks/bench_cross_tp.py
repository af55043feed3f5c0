"""Benchmark: head-sharded pages (``tp_lcm_size`` set) against whole pages, same bytes, same run, per backend.

A TP2 rank of a Llama-3-8B-like model (4 of 8 KV heads, head_dim 128, bfloat16; ``--layers`` 32 and
``--page-size`` 64 by default: 4 MiB pages, SGLang's usual page of 64 tokens) writes, looks up and
reads ``--batch`` pages two ways on one backend: *unsplit* (no ``tp_lcm_size``, one record per page)
and *split* (``tp_lcm_size=--lcm``, ``lcm/2`` shard records per page). The sides alternate which
goes first each round; every read is checked against the written bytes. Per layout (``page_head``:
shards are slices of the page, zero-copy; the other layouts gather and scatter through a staging
copy) it prints the median time per call of each side, and the median and spread (min..max) of the
paired per-round ratio split/unsplit (goal on ``page_head``: >= 0.9x the unsplit speed, i.e. a time
ratio <= 1/0.9). ``gather_ms``/``scatter_ms`` are the staging copies of the batch alone, without a
backend. ``per_record_us`` is (split - unsplit) time over the extra records: what one more record
costs on that backend (clearest with small pages: ``--page-size 16 --layers 16``).

    python benchmarks/bench_cross_tp.py --backends file,sim --layouts page_head,page_first --repeat 11

``redis``, ``s3`` and ``fsspec`` (over the test S3 server) need the test servers
(``scripts/services/start.sh``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, load_backend, make_config
from hicache_storage.pools.buffers import pool_page_buffers
from hicache_storage.pools.host import pool_facts
from hicache_storage.pools.shard_plan import plan_head_shards
from hicache_storage.settings import StorageSettings
from hicache_storage.testing import random_keys

HEADS, HEAD_DIM = 8, 128
OPS = ("set", "exists", "get")


def _s3_settings(bucket: str) -> dict[str, Any]:
    """The test S3 server's settings, with ``bucket`` created on it."""
    from hicache_storage.testing.services import TestServices, s3_client

    settings = TestServices(Path(__file__).resolve().parent.parent).settings()
    with contextlib.suppress(Exception):  # already there from an earlier layout
        s3_client(settings).create_bucket(Bucket=bucket)
    return settings


def backend_options(name: str, root: str) -> dict[str, Any]:
    if name in ("s3", "fsspec"):
        from hicache_storage.testing.services import s3_backend_options

        bucket = f"bench-cross-tp-{os.path.basename(root).lower().replace('_', '-')}"
        settings = _s3_settings(bucket)
        if name == "s3":
            return s3_backend_options(settings, bucket)
        storage = {
            "endpoint_url": settings["HICACHE_TEST_S3_ENDPOINT"],
            "key": settings["HICACHE_TEST_S3_ACCESS_KEY_ID"],
            "secret": settings["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
            "client_kwargs": {"region_name": settings["HICACHE_TEST_S3_REGION"]},
        }
        return {"url": f"s3://{bucket}/fsspec", "storage_options": storage}
    if name == "file":
        return {"path": os.path.join(root, "file")}
    if name == "slab":
        return {"path": os.path.join(root, "slab"), "capacity_bytes": 2 << 30}
    if name == "sim":
        return {"sleep": False}
    if name == "redis":
        return {"host": "127.0.0.1", "port": int(os.environ.get("HICACHE_TEST_REDIS_PORT", "16379")), "ttl_s": 600}
    raise SystemExit(f"unknown backend {name!r}; expected file, slab, sim, redis, s3 or fsspec")


def make_rank_pool(layout: str, pages: int, page_size: int, layers: int) -> HostKVPool:
    pool = HostKVPool(
        num_pages=pages,
        page_size=page_size,
        layer_num=layers,
        head_num=HEADS // 2,
        head_dim=HEAD_DIM,
        layout=layout,
        pin_memory=False,
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3)))
    return pool


def open_storage(name: str, root: str, pool: HostKVPool, lcm: int | None) -> HiCacheStorage:
    config = make_config("bench-cross-tp", tp_rank=0, tp_size=2, extra_config=backend_options(name, root))
    config.tp_lcm_size = lcm
    storage = load_backend(name, config)
    storage.register_mem_pool_host(pool)
    return storage


def timed(call: Callable[..., Any], *args: Any) -> float:
    begin = time.perf_counter()
    call(*args)
    return time.perf_counter() - begin


def codec_ms(pool: HostKVPool, lcm: int, batch: int) -> dict[str, float]:
    """Median gather (for a write) and scatter (after a read) time of ``batch`` pages, no backend."""
    config = make_config("bench-cross-tp", tp_size=2, extra_config={"tp_lcm_size": lcm})
    facts = pool_facts(pool)
    shards = plan_head_shards("kv", config, StorageSettings.from_config(config), facts)
    assert shards is not None
    pages = pool_page_buffers(pool, [n * pool.page_size for n in range(batch)], facts)
    gather = [timed(shards.for_write, pages) for _ in range(7)]
    scatter = []
    for _ in range(7):
        _, after = shards.for_read(pages)
        scatter.append(timed(after, [True] * batch) if after is not None else 0.0)
    return {"gather_ms": statistics.median(gather) * 1e3, "scatter_ms": statistics.median(scatter) * 1e3}


def bench_layout(name: str, layout: str, lcm: int, args: argparse.Namespace, root: str) -> dict[str, Any]:
    batch, repeat, page = args.batch, args.repeat, args.page_size
    pool = make_rank_pool(layout, 2 * batch, args.page_size, args.layers)
    sides = {"unsplit": open_storage(name, root, pool, None), "split": open_storage(name, root, pool, lcm)}
    first = torch.arange(batch * page, dtype=torch.int64)
    second = first + batch * page
    times: dict[str, dict[str, list[float]]] = {side: {op: [] for op in OPS} for side in sides}
    try:
        for round_number in range(repeat + 1):
            keys = random_keys(batch)
            order = ["unsplit", "split"] if round_number % 2 else ["split", "unsplit"]
            for side in order:
                storage = sides[side]
                took = {
                    "set": timed(storage.batch_set_v1, keys, first),
                    "exists": timed(storage.batch_exists, keys),
                    "get": timed(storage.batch_get_v1, keys, second),
                }
                for n in range(batch):
                    read, written = pool.get_data_page((batch + n) * page), pool.get_data_page(n * page)
                    if not torch.equal(read.view(torch.uint8), written.view(torch.uint8)):
                        raise SystemExit(f"{name}/{layout}/{side}: page {n} read back differs from the one written")
                if round_number:  # round 0 warms up
                    for op in OPS:
                        times[side][op].append(took[op])
    finally:
        for storage in sides.values():
            storage.clear()
            storage.close()
    records = lcm // 2
    row: dict[str, Any] = {
        "backend": name,
        "layout": layout,
        "batch": batch,
        "page_bytes": pool.bytes_per_page,
        "records_per_page": records,
        "rounds": repeat,
    }
    for op in OPS:
        split, unsplit = times["split"][op], times["unsplit"][op]
        ratios = [s / u for s, u in zip(split, unsplit, strict=True)]
        row[f"{op}_unsplit_ms"] = round(statistics.median(unsplit) * 1e3, 3)
        row[f"{op}_split_ms"] = round(statistics.median(split) * 1e3, 3)
        row[f"{op}_ratio"] = round(statistics.median(ratios), 3)
        row[f"{op}_ratio_spread"] = [round(min(ratios), 3), round(max(ratios), 3)]
        extra = (statistics.median(split) - statistics.median(unsplit)) / (batch * (records - 1))
        row[f"{op}_per_record_us"] = round(extra * 1e6, 1)
    row.update({key: round(value, 3) for key, value in codec_ms(pool, lcm, batch).items()})
    return row


def _cell(row: dict[str, Any], op: str) -> str:
    low, high = row[f"{op}_ratio_spread"]
    times = f"{row[f'{op}_unsplit_ms']:.2f}/{row[f'{op}_split_ms']:.2f} ms"
    return f"{op} {times} x{row[f'{op}_ratio']:.3f} [{low:.2f}..{high:.2f}]"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="file,sim", help="comma-separated: file, slab, sim, redis, s3, fsspec")
    parser.add_argument("--layouts", default="page_head,page_first", help="comma-separated host layouts")
    parser.add_argument("--lcm", type=int, default=4, help="tp_lcm_size (records per page: lcm / 2)")
    parser.add_argument("--batch", type=int, default=8, help="pages per call")
    parser.add_argument("--page-size", type=int, default=64, help="tokens per page")
    parser.add_argument("--layers", type=int, default=32, help="layers of the model")
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds; medians are reported")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cross-tp-") as root:
        for name in args.backends.split(","):
            for layout in args.layouts.split(","):
                row = bench_layout(name.strip(), layout.strip(), args.lcm, args, root)
                rows.append(row)
                cells = [_cell(row, op) for op in OPS]
                codec = f"gather {row['gather_ms']:.2f} ms scatter {row['scatter_ms']:.2f} ms"
                print(f"{name:6} {layout:17} unsplit/split: " + "  ".join(cells) + f"  ({codec})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "machine": describe()}, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
