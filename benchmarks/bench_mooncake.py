"""Benchmark: the mooncake backend's v1 calls against raw ``MooncakeDistributedStore`` batch calls.

Same run, same master, same host pool (MHA ``page_first`` bf16, 512 KiB pages = K + V segments of
256 KiB), batches of 32 and 128 pages. Raw baseline per batch (``raw``): ``batch_remove(force)`` +
``batch_put_from_multi_buffers`` for writes (the raw way to overwrite with several buffers per
object: Mooncake has no multi-buffer upsert and its put keeps an existing value) and
``batch_get_into_multi_buffers`` for reads, with pointers from the pool's ``get_page_buffer_meta``
and no header. ``rawsess`` moves the same buffers through the client's put and get sessions
(``batch_put_session_start`` + ``batch_put_from_multi_buffer_ranges`` + ``batch_put_session_end``
to fresh keys, which cannot overwrite; ``batch_get_session_start`` +
``batch_get_into_multi_buffer_ranges`` + ``batch_get_session_end``): the fastest raw calls of the
client, the ones our zero-copy path is built on. ``rawhdr`` is ``raw`` with a 32-byte buffer from
registered memory before each page's segments ([header, K, V], the shape of our objects, header
bytes not computed): what one more buffer per page costs the raw client itself, the ceiling of any
design that keeps a header per object without copying the page. Ours: ``batch_set_v1`` / ``batch_get_v1`` of three
backend instances on the same pool: ``ours`` (defaults: header + XXH3-64 of every page, written
and verified; ``transfer: auto``, which at these segment sizes is zero-copy), ``nohash``
(``verify_checksum: false``: header with key digest and length only) and ``staged`` (``transfer:
staged``: each page copied with its header into registered memory and moved as one buffer).

Each round runs the variants in a rotated order, each writing its batch, reading it back and
(untimed) removing it, so the store holds one batch at a time (128 x 512 KiB pages fit the test
services' 256 MB segment). A write or read that fails (a full store answers ``False``) is retried
after the batch is removed and a pause, at most ``--retries`` times, and counted in the results
(``failed_attempts``); only a variant failing every attempt stops the run. Every object the run
wrote is under one fresh key prefix and removed at the end. Prints medians (ms per batch) and,
per variant, the median over rounds of raw_time/our_time in that round (>= 0.9 is the goal); the
results also hold the min and max of that ratio and the median of rawsess_time/our_time.
``--page-tokens`` scales the page (32 tokens = 512 KiB; 4 = 64 KiB, where ``auto`` stages): over
TCP each buffer of a transfer costs a request of its own, so the header buffer is a fixed cost per
page that larger pages amortise and staging avoids.

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
from collections.abc import Callable
from functools import partial
from typing import Any

os.environ.setdefault("MC_LOG_LEVEL", "WARNING")

import numpy as np
import torch
from hicache_storage_mooncake import MooncakeBackend
from hicache_storage_mooncake.record import HEADER_SIZE
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, make_config

PAGE_SIZE = 32  # 4 layers x 8 heads x 128 dims x bf16 x (K, V) x 32 tokens = 512 KiB
VARIANTS = ("ours", "nohash", "staged", "raw", "rawhdr", "rawsess")
OURS = ("ours", "nohash", "staged")
RETRY_PAUSE_S = 0.5


class Batch:
    """One batch size: each variant's keys and its set, get and (untimed) remove calls."""

    def __init__(
        self,
        instances: dict[str, HiCacheStorage],
        store: Any,
        config: Any,
        pool: HostKVPool,
        size: int,
        *,
        headers: int,
    ):
        self.size = size
        prefix = instances["ours"].backend.key_prefix  # type: ignore[attr-defined]
        stem = [secrets.token_hex(16) for _ in range(size)]
        self.keys = {name: [f"{name[0]}{key}" for key in stem] for name in OURS}
        self.keys["raw"] = [f"{prefix}raw/{key}" for key in stem]
        self.keys["rawsess"] = [f"{prefix}rawsess/{key}" for key in stem]
        self.keys["rawhdr"] = [f"{prefix}rawhdr/{key}" for key in stem]
        host = torch.arange(size * pool.page_size, dtype=torch.int64)
        ptrs, sizes = pool.get_page_buffer_meta(host)
        per = len(ptrs) // size
        page_ptrs = [ptrs[n * per : (n + 1) * per] for n in range(size)]
        page_sizes = [sizes[n * per : (n + 1) * per] for n in range(size)]
        self.calls: dict[str, Callable[[], bool]] = {}
        self.removers: dict[str, Callable[[], object]] = {}
        for name in OURS:
            instance, keys = instances[name], self.keys[name]
            self.calls[f"{name}_set"] = partial(_all_true, instance.batch_set_v1, keys, host)
            self.calls[f"{name}_get"] = partial(_all_true, instance.batch_get_v1, keys, host)
            self.removers[name] = partial(instance.delete, keys)
        raw_keys, sess_keys, buffers = self.keys["raw"], self.keys["rawsess"], (page_ptrs, page_sizes)
        self.calls["raw_set"] = partial(_raw_put, store, config, raw_keys, buffers)
        self.calls["raw_get"] = partial(_raw_get, store, raw_keys, buffers)
        with_header = (
            [[headers + n * HEADER_SIZE, *row] for n, row in enumerate(page_ptrs)],
            [[HEADER_SIZE, *row] for row in page_sizes],
        )
        self.calls["rawhdr_set"] = partial(_raw_put, store, config, self.keys["rawhdr"], with_header)
        self.calls["rawhdr_get"] = partial(_raw_get, store, self.keys["rawhdr"], with_header)
        self.calls["rawsess_set"] = partial(_session_put, store, config, sess_keys, buffers)
        self.calls["rawsess_get"] = partial(_session_get, store, sess_keys, buffers)
        for name in ("raw", "rawhdr", "rawsess"):
            self.removers[name] = partial(store.batch_remove, self.keys[name], True)


def _all_true(call: Callable[[list[str], torch.Tensor], list[bool]], keys: list[str], host: torch.Tensor) -> bool:
    return all(call(keys, host))


Buffers = tuple[list[list[int]], list[list[int]]]


def _raw_put(store: Any, config: Any, keys: list[str], buffers: Buffers) -> bool:
    """The raw write of ``buffers`` (pointers, sizes per page): ``batch_remove(force)``, then the multi-buffer put."""
    store.batch_remove(keys, True)
    return all(code == 0 for code in store.batch_put_from_multi_buffers(keys, *buffers, config))


def _raw_get(store: Any, keys: list[str], buffers: Buffers) -> bool:
    """The raw read: a hit only when the whole page arrived."""
    total = sum(buffers[1][0])
    return all(code == total for code in store.batch_get_into_multi_buffers(keys, *buffers))


def _offsets(sizes: list[list[int]]) -> list[list[int]]:
    """Where each buffer of a page goes in its object: back to back."""
    return [[sum(row[:n]) for n in range(len(row))] for row in sizes]


def _session_put(store: Any, config: Any, keys: list[str], buffers: Buffers) -> bool:
    """The raw write through a put session (fresh keys only: a session cannot overwrite)."""
    ptrs, sizes = buffers
    if not all(code == 0 for code in store.batch_put_session_start(keys, [sum(row) for row in sizes], config)):
        store.batch_put_session_revoke(keys)
        return False
    store.batch_put_from_multi_buffer_ranges(keys, ptrs, sizes, _offsets(sizes))
    return all(code == 0 for code in store.batch_put_session_end(keys))


def _session_get(store: Any, keys: list[str], buffers: Buffers) -> bool:
    """The raw read through a get session: a hit only when the whole page arrived."""
    ptrs, sizes = buffers
    total = sum(sizes[0])
    try:
        if not all(code == 0 for code in store.batch_get_session_start(keys)):
            return False
        return all(
            code == total for code in store.batch_get_into_multi_buffer_ranges(keys, ptrs, sizes, _offsets(sizes))
        )
    finally:
        store.batch_get_session_end(keys)


def run_variant(batch: Batch, variant: str, retries: int) -> tuple[dict[str, float], int]:
    """Write, read back and remove ``variant``'s batch: (seconds per op, failed attempts)."""
    failed = 0
    while True:
        seconds: dict[str, float] = {}
        for op in ("set", "get"):
            begin = time.perf_counter()
            if not batch.calls[f"{variant}_{op}"]():
                break
            seconds[op] = time.perf_counter() - begin
        batch.removers[variant]()  # untimed: the next variant finds the room this one used
        if len(seconds) == 2:
            return seconds, failed
        failed += 1
        if failed > retries:
            raise SystemExit(
                f"{variant} failed {failed} times in a row at batch {batch.size}: the store needs about "
                f"{batch.size} x the page size free for one batch; is another writer filling it?"
            )
        time.sleep(RETRY_PAUSE_S)  # a full store evicts in the background


def measure(batch: Batch, repeat: int, retries: int) -> tuple[dict[str, list[float]], int]:
    """Timings per ``<variant>_<op>`` over ``repeat`` rounds after one untimed, and the failed attempts."""
    timings: dict[str, list[float]] = {f"{v}_{op}": [] for v in VARIANTS for op in ("set", "get")}
    failed = 0
    for round_number in range(repeat + 1):  # round 0 warms up
        shift = round_number % len(VARIANTS)
        for variant in VARIANTS[shift:] + VARIANTS[:shift]:
            seconds, failures = run_variant(batch, variant, retries)
            failed += failures
            if round_number:
                for op, value in seconds.items():
                    timings[f"{variant}_{op}"].append(value)
    return timings, failed


def summarise(timings: dict[str, list[float]], gib: float) -> dict[str, float]:
    """Median ms per op, and per variant of ours the median (min, max) over rounds of raw / ours, and the
    median of rawsess / ours."""
    med = {name: statistics.median(values) * 1e3 for name, values in timings.items()}
    row: dict[str, float] = {f"{name}_ms": round(value, 3) for name, value in med.items()}
    for variant in OURS:
        for op in ("set", "get"):  # per-round ratios: the sides of a round ran back to back
            mine = timings[f"{variant}_{op}"]
            row[f"{variant}_{op}_ratio"] = round(
                statistics.median(r / o for r, o in zip(timings[f"raw_{op}"], mine)), 3
            )
            row[f"{variant}_{op}_ratio_min"] = round(min(r / o for r, o in zip(timings[f"raw_{op}"], mine)), 3)
            row[f"{variant}_{op}_ratio_max"] = round(max(r / o for r, o in zip(timings[f"raw_{op}"], mine)), 3)
            floor = timings[f"rawsess_{op}"]
            row[f"{variant}_{op}_vs_rawsess"] = round(statistics.median(f / o for f, o in zip(floor, mine)), 3)
            headed = timings[f"rawhdr_{op}"]
            row[f"{variant}_{op}_vs_rawhdr"] = round(statistics.median(h / o for h, o in zip(headed, mine)), 3)
            row[f"{variant}_{op}_gib_s"] = round(gib / med[f"{variant}_{op}"] * 1e3, 2)
    for op in ("set", "get"):  # what the header's buffer alone costs the raw client
        row[f"rawhdr_{op}_ratio"] = round(
            statistics.median(r / h for r, h in zip(timings[f"raw_{op}"], timings[f"rawhdr_{op}"])), 3
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--page-tokens", type=int, default=PAGE_SIZE, help="tokens per page (32 = 512 KiB)")
    parser.add_argument("--retries", type=int, default=3, help="attempts after a failed write or read")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    master = os.environ.get("HICACHE_TEST_MOONCAKE_MASTER", "127.0.0.1:15551")
    metadata = os.environ.get("HICACHE_TEST_MOONCAKE_METADATA", "http://127.0.0.1:15552/metadata")
    machine_before = describe()
    top = max(args.batches)
    pool = HostKVPool(
        num_pages=top, page_size=args.page_tokens, layer_num=4, head_num=8, head_dim=128, layout="page_first"
    )
    raw_bytes = pool.kv_buffer.view(-1).view(torch.uint8)
    raw_bytes.copy_(torch.randint(0, 256, raw_bytes.shape, dtype=torch.uint8))
    prefix = f"bench{secrets.token_hex(3)}/"
    options = {
        "master_server_address": master,
        "metadata_server": metadata,
        "global_segment_size": 0,
        "key_prefix": prefix,
    }
    extra: dict[str, dict[str, Any]] = {
        "ours": {},
        "nohash": {"verify_checksum": False},
        "staged": {"transfer": "staged"},
    }
    instances: dict[str, HiCacheStorage] = {}
    for name, settings in extra.items():
        instances[name] = HiCacheStorage(MooncakeBackend, make_config("bench", extra_config={**options, **settings}))
        instances[name].register_mem_pool_host(pool)
    mooncake = instances["ours"].backend
    assert isinstance(mooncake, MooncakeBackend)
    store, config = mooncake.client, mooncake.replicate  # the same client, pool already registered
    headers = np.zeros(top * HEADER_SIZE, dtype=np.uint8)  # rawhdr's header buffers (registered below)
    results: dict[str, Any] = {
        "page_bytes": pool.bytes_per_page,
        "master": master,
        "repeat": args.repeat,
        "put_sessions": mooncake.put_sessions,
        "variants": {
            "ours": "defaults (verify_checksum: true, transfer: auto)",
            "nohash": "verify_checksum: false",
            "staged": "transfer: staged",
            "raw": "raw client: batch_remove + batch_put_from_multi_buffers / batch_get_into_multi_buffers, no header",
            "rawsess": "raw client: put session + ranged put (fresh keys) / get session + ranged get, no header",
            "rawhdr": "raw, with a 32-byte registered buffer before each page's segments (the header's shape)",
        },
        "batches": {},
    }
    if store.register_buffer(headers.ctypes.data, headers.nbytes) != 0:
        raise SystemExit("could not register the raw header buffers with the Mooncake client")
    try:
        for size in args.batches:
            batch = Batch(instances, store, config, pool, size, headers=headers.ctypes.data)
            timings, failed = measure(batch, args.repeat, args.retries)
            row = summarise(timings, size * pool.bytes_per_page / (1 << 30))
            row["failed_attempts"] = failed
            results["batches"][str(size)] = row
            for op in ("set", "get"):
                print(
                    f"batch {size:4d} x {pool.bytes_per_page >> 10} KiB {op}: raw {row[f'raw_{op}_ms']:.2f} ms "
                    f"(sessions {row[f'rawsess_{op}_ms']:.2f}; with header {row[f'rawhdr_{op}_ms']:.2f}, "
                    f"ratio {row[f'rawhdr_{op}_ratio']:.3f}) | "
                    + " | ".join(f"{v} {row[f'{v}_{op}_ms']:.2f} ms ratio {row[f'{v}_{op}_ratio']:.3f}" for v in OURS)
                )
            if failed:
                print(f"batch {size:4d}: {failed} failed attempt(s) retried")
    finally:
        store.remove_by_regex("^" + prefix.replace(".", r"\."), True)
        store.unregister_buffer(headers.ctypes.data)
        for instance in instances.values():
            instance.close()
    if args.json:
        machine = {**machine_before, "load_average_after": describe()["load_average"]}
        with open(args.json, "w") as handle:
            json.dump({**results, "machine": machine}, handle, indent=2)


if __name__ == "__main__":
    main()
