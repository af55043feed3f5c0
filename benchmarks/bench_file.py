"""Benchmark: the file backend's v1 calls against raw Python file I/O on the same bytes, same run.

Writes and reads ``--pages`` pages of 512 KiB (MHA ``page_first`` bf16) in batches of ``--batch``
through ``FileBackend.batch_set_v1`` / ``batch_get_v1``, and, interleaved, the raw baseline: per page
``open`` a temp file, ``write`` the page's segments, ``os.replace`` onto the final name; reads
``readinto`` the same files into the same host buffers. The page cache is warm (one untimed pass of
each first). Prints medians over ``--repeat`` rounds and the throughput ratio ours/raw.

    python benchmarks/bench_file.py --pages 512 --repeat 5 [--dir /tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
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
from disk_pages import PAGE_SIZE, make_pool
from hicache_storage_file import FileBackend
from hicache_storage_file.raw_baseline import RawFiles
from machine import describe

from hicache_storage import HiCacheStorage, make_config


def timed(run: Callable[[], None]) -> float:
    begin = time.perf_counter()
    run()
    return time.perf_counter() - begin


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=512, help="distinct pages written and read per round")
    parser.add_argument("--batch", type=int, default=128, help="pages per batch call (SGLang sends at most 128)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds; medians are reported")
    parser.add_argument("--io-threads", type=int, default=None, help="file backend io_threads (default: its own)")
    parser.add_argument("--fsync", action="store_true", help="fsync both sides' writes (default: page cache only)")
    parser.add_argument("--dir", default=None, help="parent directory for the data (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.batch < 1 or args.repeat < 1:
        parser.error("--pages, --batch and --repeat must be >= 1")
    batch = min(args.batch, args.pages)
    pool = make_pool(batch)
    page_bytes = pool.bytes_per_page
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(args.pages)]
    batches = [keys[i : i + batch] for i in range(0, len(keys), batch)]
    host_indices = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)

    with tempfile.TemporaryDirectory(prefix="bench-file-", dir=args.dir) as workdir:
        options: dict[str, Any] = {"path": os.path.join(workdir, "ours"), "fsync": args.fsync}
        if args.io_threads is not None:
            options["io_threads"] = args.io_threads
        backend = HiCacheStorage(FileBackend, make_config("bench", extra_config=options))
        backend.register_mem_pool_host(pool)
        files = backend.backend
        assert isinstance(files, FileBackend)
        raw = RawFiles(Path(workdir) / "raw", fsync=args.fsync)
        space = backend.keyspace
        assert space is not None
        raw_batches = [space.storage_keys(b) for b in batches]

        def pages_for(count: int) -> list[list[memoryview]]:
            return [pool.page_segments(i * PAGE_SIZE) for i in range(count)]

        def ours_write() -> None:
            for b in batches:
                if not all(backend.batch_set_v1(b, host_indices[: len(b) * PAGE_SIZE])):
                    raise RuntimeError("file backend write failed")

        def ours_read() -> None:
            for b in batches:
                if not all(backend.batch_get_v1(b, host_indices[: len(b) * PAGE_SIZE])):
                    raise RuntimeError("file backend read missed")

        def raw_write() -> None:
            for b in raw_batches:
                raw.set(b, pages_for(len(b)))

        def raw_read() -> None:
            for b in raw_batches:
                raw.get(b, pages_for(len(b)))

        for run in (ours_write, raw_write, ours_read, raw_read):  # warm-up: files exist, page cache warm
            run()
        samples: dict[str, list[float]] = {"ours_write": [], "raw_write": [], "ours_read": [], "raw_read": []}
        for round_number in range(args.repeat):
            # Alternate which side goes first, and flush dirty pages before each write run, so neither
            # side pays for the other's writeback.
            order = (0, 1) if round_number % 2 == 0 else (1, 0)
            writes = [("ours_write", ours_write), ("raw_write", raw_write)]
            reads = [("ours_read", ours_read), ("raw_read", raw_read)]
            for index in order:
                name, run = writes[index]
                os.sync()
                samples[name].append(timed(run))
            for index in order:
                name, run = reads[index]
                samples[name].append(timed(run))
        stats = backend.get_stats()

    total = args.pages * page_bytes
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result: dict[str, Any] = {
        "io_threads": files.io_threads,
        "fsync": args.fsync,
        "pages": args.pages,
        "batch": batch,
        "page_bytes": page_bytes,
        "repeat": args.repeat,
        "median_seconds": {k: round(v, 6) for k, v in medians.items()},
        "gbps": {k: round(total / v / 1e9, 3) for k, v in medians.items()},
        "ratio_write": round(medians["raw_write"] / medians["ours_write"], 3),
        "ratio_read": round(medians["raw_read"] / medians["ours_read"], 3),
        "ratio_write_per_round_median": round(
            statistics.median(r / o for r, o in zip(samples["raw_write"], samples["ours_write"])), 3
        ),
        "ratio_read_per_round_median": round(
            statistics.median(r / o for r, o in zip(samples["raw_read"], samples["ours_read"])), 3
        ),
        "samples_seconds": {k: [round(x, 6) for x in v] for k, v in samples.items()},
        "integrity_failures": stats["counters"].get("integrity_failures", 0),
        "faults": stats["faults"],
    }
    print(
        f"{args.pages} pages x {page_bytes // 1024} KiB, batch {batch}, io_threads {result['io_threads']}, "
        f"fsync {args.fsync}, {args.repeat} rounds (medians)\n"
        f"  write: ours {result['gbps']['ours_write']:.2f} GB/s  raw {result['gbps']['raw_write']:.2f} GB/s"
        f"  ratio ours/raw {result['ratio_write']:.3f}\n"
        f"  read:  ours {result['gbps']['ours_read']:.2f} GB/s  raw {result['gbps']['raw_read']:.2f} GB/s"
        f"  ratio ours/raw {result['ratio_read']:.3f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "machine": describe()}, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
