"""Benchmark: the first pass of writes into a new slab against the file backend writing into an empty root.

Each repetition builds both stores anew in fresh directories: a slab of ``--pages`` pages (created
and preallocated with ``posix_fallocate``, no ``zero_fill``: its slots are fallocated, "unwritten"
blocks until their first write) and a file backend without a size limit (nothing to delete on a
first pass). Before each side's pass: ``os.sync()``, so no side pays for the other's (or an
earlier repetition's) writeback, and the previous repetition's files are removed. The order of the
sides alternates. Timed: the writes of ``--pages`` 512 KiB pages in batches of ``--batch``
(``--writeback``: and the ``os.sync()`` that writes them to the disk, where ext4 and XFS convert the
fallocated extents the slab's first writes land in); the
slab's creation (``register_mem_pool_host``) is timed apart and reported, so no cost hides in it.

Reported: per side GB/s of each repetition, and the per-repetition ratio slab / file (throughput;
>= 1: the slab is faster) as median with min and max.

    python benchmarks/bench_slab_first_pass.py --pages 1024 --repeat 5 [--dir /var/tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from disk_pages import PAGE_SIZE, make_pool
from hicache_storage_file import FileBackend
from hicache_storage_slab import SlabBackend
from hicache_storage_slab.geometry import capacity_for
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, make_config


def _keys(tag: str, count: int) -> list[str]:
    return [hashlib.sha256(f"{tag}-{i}".encode()).hexdigest() for i in range(count)]


def _write_all(storage: HiCacheStorage, keys: list[str], batch: int, *, writeback: bool) -> float:
    """Seconds to write ``keys`` in batches (each batch from the first ``batch`` pages of the pool);
    ``writeback``: until ``os.sync()`` has written them to the disk too."""
    indices = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)
    begin = time.perf_counter()
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        if not all(storage.batch_set_v1(chunk, indices[: len(chunk) * PAGE_SIZE])):
            raise RuntimeError(f"{type(storage.backend).__name__}: a write failed")
    if writeback:
        os.sync()
    return time.perf_counter() - begin


def _side(name: str, root: str, pool: HostKVPool, pages: int) -> tuple[HiCacheStorage, float]:
    """A new store of ``name`` below ``root`` and the seconds its creation took."""
    if name == "slab":  # room for every page once
        capacity = capacity_for(pages, pool.bytes_per_page)
        options: dict[str, Any] = {"path": root, "capacity_bytes": capacity, "resilience": False}
        cls: Any = SlabBackend
    else:
        options, cls = {"path": root, "resilience": False}, FileBackend
    begin = time.perf_counter()
    storage = HiCacheStorage(cls, make_config("first-pass", extra_config={**options, "manifests": False}))
    storage.register_mem_pool_host(pool)
    return storage, time.perf_counter() - begin


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=1024, help="pages written per side and repetition")
    parser.add_argument("--batch", type=int, default=128, help="pages per batch call")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (fresh stores each)")
    parser.add_argument("--dir", default=None, help="parent directory for the data (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument(
        "--writeback", action="store_true", help="time until os.sync() has written the pass to the disk"
    )
    args = parser.parse_args(argv)
    pool = make_pool(args.batch)
    gbps: dict[str, list[float]] = {"slab": [], "file": []}
    created: dict[str, list[float]] = {"slab": [], "file": []}
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-first-pass-", dir=args.dir) as workdir:
        for repetition in range(args.repeat):
            seconds: dict[str, float] = {}
            for name in ("slab", "file") if repetition % 2 == 0 else ("file", "slab"):
                root = os.path.join(workdir, f"{name}-{repetition}")
                os.sync()  # nothing dirty from before: this pass pays only for its own writeback
                storage, setup = _side(name, root, pool, args.pages)
                try:
                    keys = _keys(f"{name}{repetition}", args.pages)
                    seconds[name] = _write_all(storage, keys, args.batch, writeback=args.writeback)
                finally:
                    storage.close()
                    shutil.rmtree(root, ignore_errors=True)
                created[name].append(round(setup, 4))
                gbps[name].append(round(args.pages * pool.bytes_per_page / seconds[name] / 1e9, 3))
            ratios.append(round(seconds["file"] / seconds["slab"], 3))
    result = {
        "machine": describe(),
        "pages": args.pages,
        "page_bytes": pool.bytes_per_page,
        "batch": args.batch,
        "repeat": args.repeat,
        "writeback": args.writeback,
        "gbps": gbps,
        "creation_seconds": created,
        "ratio_slab_over_file": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "ratios": ratios,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
