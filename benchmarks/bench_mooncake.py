"""Benchmark: the mooncake backend's v1 calls against raw ``MooncakeDistributedStore`` batch calls.

Same run, same master, same host pool (MHA ``page_first`` bf16, 512 KiB pages = K + V segments of
256 KiB), batches of 32 and 128 pages. Raw baseline per batch: ``batch_remove(force)`` +
``batch_put_from_multi_buffers`` for writes (Mooncake has no multi-buffer upsert; what the backend
does) and ``batch_get_into_multi_buffers`` for reads, with pointers from the pool's
``get_page_buffer_meta`` and no header. Ours: ``batch_set_v1`` / ``batch_get_v1`` of three backend
instances on the same pool: ``ours`` (defaults: header + XXH3-64 of every page, written and
verified; ``transfer: auto``, which at these segment sizes is zero-copy), ``nohash``
(``verify_checksum: false``: header with key digest and length only) and ``staged`` (``transfer:
staged``: each page copied with its header into registered memory and moved as one buffer).
Each round runs the four in a rotated order, each writing its batch, reading it back and (untimed)
removing it, so the store holds one batch at a time (128 x 512 KiB pages fit the test services'
256 MB segment); prints medians (ms per batch) and, per variant, the median over rounds of
raw_time/our_time in that round (>= 0.9 is the goal). ``--page-tokens``
scales the page (32 tokens = 512 KiB; 4 = 64 KiB, where ``auto`` stages): over TCP each buffer of a
transfer costs a request of its own, so the header buffer is a fixed cost per page that larger
pages amortise and staging avoids.

    source scripts/services/env.sh && bash scripts/services/start.sh mooncake
    python benchmarks/bench_mooncake.py --repeat 15 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import time
from typing import Any

os.environ.setdefault("MC_LOG_LEVEL", "WARNING")

import torch
from hicache_storage_mooncake import MooncakeBackend
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, make_config

PAGE_SIZE = 32  # 4 layers x 8 heads x 128 dims x bf16 x (K, V) x 32 tokens = 512 KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--page-tokens", type=int, default=PAGE_SIZE, help="tokens per page (32 = 512 KiB)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    master = os.environ.get("HICACHE_TEST_MOONCAKE_MASTER", "127.0.0.1:15551")
    metadata = os.environ.get("HICACHE_TEST_MOONCAKE_METADATA", "http://127.0.0.1:15552/metadata")
    top = max(args.batches)
    page_size = args.page_tokens
    pool = HostKVPool(num_pages=top, page_size=page_size, layer_num=4, head_num=8, head_dim=128, layout="page_first")
    raw_bytes = pool.kv_buffer.view(-1).view(torch.uint8)
    raw_bytes.copy_(torch.randint(0, 256, raw_bytes.shape, dtype=torch.uint8))
    options = {
        "master_server_address": master,
        "metadata_server": metadata,
        "global_segment_size": 0,
        "key_prefix": f"bench{secrets.token_hex(3)}/",
    }
    backend = HiCacheStorage(MooncakeBackend, make_config("bench", extra_config=options))
    backend.register_mem_pool_host(pool)
    nohash = HiCacheStorage(MooncakeBackend, make_config("bench", extra_config={**options, "verify_checksum": False}))
    nohash.register_mem_pool_host(pool)
    staged = HiCacheStorage(MooncakeBackend, make_config("bench", extra_config={**options, "transfer": "staged"}))
    staged.register_mem_pool_host(pool)
    mooncake = backend.backend
    assert isinstance(mooncake, MooncakeBackend)
    store, config = mooncake.client, mooncake.replicate  # the same client, pool already registered
    results: dict[str, Any] = {
        "page_bytes": pool.bytes_per_page,
        "master": master,
        "repeat": args.repeat,
        "variants": {
            "ours": "defaults (verify_checksum: true, transfer: auto)",
            "nohash": "verify_checksum: false",
            "staged": "transfer: staged",
            "raw": "raw client calls, no header",
        },
        "batches": {},
    }
    variants = ("ours", "nohash", "staged", "raw")
    try:
        for batch in args.batches:
            keys = [f"{secrets.token_hex(16)}" for _ in range(batch)]
            nohash_keys = [f"n{k}" for k in keys]
            staged_keys = [f"s{k}" for k in keys]
            raw_keys = [f"raw{k}" for k in keys]
            host = torch.arange(batch * page_size, dtype=torch.int64)
            ptrs, sizes = pool.get_page_buffer_meta(host)
            per = len(ptrs) // batch
            page_ptrs = [ptrs[n * per : (n + 1) * per] for n in range(batch)]
            page_sizes = [sizes[n * per : (n + 1) * per] for n in range(batch)]

            def raw_set(
                _ptrs: list[list[int]] = page_ptrs, _sizes: list[list[int]] = page_sizes, _names: list[str] = raw_keys
            ) -> bool:
                store.batch_remove(_names, True)
                return all(c == 0 for c in store.batch_put_from_multi_buffers(_names, _ptrs, _sizes, config))

            def raw_get(
                _ptrs: list[list[int]] = page_ptrs, _sizes: list[list[int]] = page_sizes, _names: list[str] = raw_keys
            ) -> bool:
                total = sum(_sizes[0])
                return all(c == total for c in store.batch_get_into_multi_buffers(_names, _ptrs, _sizes))

            def setter(instance: HiCacheStorage, names: list[str], _host: torch.Tensor = host) -> Any:
                return lambda: all(instance.batch_set_v1(names, _host))

            def getter(instance: HiCacheStorage, names: list[str], _host: torch.Tensor = host) -> Any:
                return lambda: all(instance.batch_get_v1(names, _host))

            calls = {
                "ours_set": setter(backend, keys),
                "ours_get": getter(backend, keys),
                "nohash_set": setter(nohash, nohash_keys),
                "nohash_get": getter(nohash, nohash_keys),
                "staged_set": setter(staged, staged_keys),
                "staged_get": getter(staged, staged_keys),
                "raw_set": raw_set,
                "raw_get": raw_get,
            }
            removers = {
                "ours": lambda _keys=keys: backend.delete(_keys),
                "nohash": lambda _keys=nohash_keys: nohash.delete(_keys),
                "staged": lambda _keys=staged_keys: staged.delete(_keys),
                "raw": lambda _keys=raw_keys: store.batch_remove(_keys, True),
            }
            timings: dict[str, list[float]] = {name: [] for name in calls}
            for round_number in range(args.repeat + 1):  # round 0 warms up
                shift = round_number % len(variants)
                order = variants[shift:] + variants[:shift]
                for variant in order:
                    for op in ("set", "get"):
                        name = f"{variant}_{op}"
                        begin = time.perf_counter()
                        if not calls[name]():
                            pairs = (("ours", backend), ("nohash", nohash), ("staged", staged))
                            counters = {n: b.get_stats()["counters"] for n, b in pairs}
                            need = batch * (pool.bytes_per_page + 64)
                            raise SystemExit(
                                f"{name} failed at batch {batch}: {counters} (the store needs about {need:,} "
                                "bytes free for one batch; is another writer filling it?)"
                            )
                        if round_number:
                            timings[name].append(time.perf_counter() - begin)
                    removers[variant]()  # untimed: the next variant finds the room this one used
            med = {name: statistics.median(values) * 1e3 for name, values in timings.items()}
            gib = batch * pool.bytes_per_page / (1 << 30)
            row: dict[str, float] = {f"{name}_ms": round(value, 3) for name, value in med.items()}
            for variant in ("ours", "nohash", "staged"):
                for op in ("set", "get"):  # per-round ratios: the sides of a round ran back to back
                    pairs = zip(timings[f"raw_{op}"], timings[f"{variant}_{op}"], strict=True)
                    row[f"{variant}_{op}_ratio"] = round(statistics.median(raw / ours for raw, ours in pairs), 3)
                    row[f"{variant}_{op}_gib_s"] = round(gib / med[f"{variant}_{op}"] * 1e3, 2)
            results["batches"][str(batch)] = row
            for op in ("set", "get"):
                print(
                    f"batch {batch:4d} x {pool.bytes_per_page >> 10} KiB {op}: raw {med[f'raw_{op}']:.2f} ms | "
                    f"ours {med[f'ours_{op}']:.2f} ms ratio {row[f'ours_{op}_ratio']:.3f} | "
                    f"nohash {med[f'nohash_{op}']:.2f} ms ratio {row[f'nohash_{op}_ratio']:.3f} | "
                    f"staged {med[f'staged_{op}']:.2f} ms ratio {row[f'staged_{op}_ratio']:.3f}"
                )
    finally:
        for instance in (backend, nohash, staged):
            instance.clear()
            instance.close()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({**results, "machine": describe()}, handle, indent=2)


if __name__ == "__main__":
    main()
