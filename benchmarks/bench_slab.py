"""Benchmark: the slab backend against the physical baseline, the file backend and SGLang's HiCacheFile.

Same pages for every side, one run, sides interleaved batch by batch (the order rotates per batch),
medians:

- ``slab``: ``SlabBackend.batch_set_v1`` / ``batch_get_v1`` (integrity checks on: every write
  checksums, every read verifies key, length and checksum). Each round writes fresh keys, as an
  engine does, into a store of four rounds' pages that the warm-up has filled: every write evicts
  (steady state of a full cache). The store is created with ``zero_fill`` so its slots are written
  blocks, as every slot is after its first write (``--fresh-slab``: plain fallocated blocks, the
  first pass over a new store). Reads that miss are counted in the results (none expected: the
  store holds four rounds and replaces the least recently used).
- ``raw``: the physical baseline, ``os.pwritev`` of each page's segments into a preallocated file and
  ``os.preadv`` back into them (``RawSlab``, same thread count as the slab, readahead off like the
  slab's files): no header, no checksum, no index. Its file has the slab's footprint (four rounds
  of pages) with the pages at random places in it, as hashing places them in the slab; the rounds
  cycle over the four sets of extents.
- ``file``: ``FileBackend.batch_set_v1`` / ``batch_get_v1`` (one file per page, fresh keys per round)
  in the slab's steady state: ``max_bytes`` of four rounds' pages, filled by the warm-up, so every
  timed write also deletes the oldest page files (their count is reported).
- ``file_growing``: the same without a size limit: the directory only grows, nothing is deleted.
- ``sglang``: SGLang's ``HiCacheFile`` through its generic ``batch_set`` / ``batch_get`` (one flat
  tensor per page), only when ``sglang`` is importable; skipped otherwise.

Pages are 512 KiB (MHA ``page_first`` bf16), in batches of ``--batch``. Per round: the writes, then
the reads with the page cache warm (the pages were just written), then the reads cold: before them
every side's data is written back (``os.sync``) and dropped from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)``: every page file of ``file`` and ``sglang``, the raw file,
and the slot area of the slab files (the slot headers, 256 bytes per slot, stay cached as they do in
use, like the file backends' directory entries and inodes, which ``DONTNEED`` does not drop). Writes
go to the page cache (``--fsync``: the slab, raw and file sides are durable before they return).

Each batch of a phase is timed on every side back to back, so a disturbance from outside hits the
sides alike. Reported: per side the median batch time as GB/s, and per pair of sides the median of
the per-batch time ratios, as a throughput ratio ours / theirs (>= 1: ours is faster).

    python benchmarks/bench_slab.py --pages 512 --repeat 9 [--dir /var/tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
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
from hicache_storage_slab import SlabBackend
from hicache_storage_slab.geometry import capacity_for
from hicache_storage_slab.raw_baseline import RawSlab
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, make_config
from hicache_storage.plugin.page_format import HEADER_SIZE as FILE_HEADER_BYTES

SLAB_ROUNDS = 4  # the slab holds this many rounds of pages
PHASES = ("write", "read_warm", "read_cold")
Batch = Callable[[int, int], None]  # (round, batch number)


def keys_for(tag: str, count: int) -> list[str]:
    return [hashlib.sha256(f"{tag}-{i}".encode()).hexdigest() for i in range(count)]


def batches_of(keys: list[str], batch: int) -> list[list[str]]:
    return [keys[i : i + batch] for i in range(0, len(keys), batch)]


def drop_cache(regions: list[tuple[str, int]]) -> None:
    """Evict these (file, from offset) regions from the page cache (written back first by the caller)."""
    for path, offset in regions:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, offset, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files_below(directory: str) -> list[tuple[str, int]]:
    return [(os.path.join(root, name), 0) for root, _dirs, names in os.walk(directory) for name in names]


class Side:
    """One contender: write / read one batch of a round, and the file regions to drop for a cold read."""

    def __init__(self, name: str, write: Batch, read: Batch, regions: Callable[[], list[tuple[str, int]]]) -> None:
        self.name = name
        self.write = write
        self.read = read
        self.regions = regions

    def run(self, phase: str, round_number: int, batch_number: int) -> None:
        (self.write if phase == "write" else self.read)(round_number, batch_number)


def build_sides(
    args: argparse.Namespace, workdir: str, pool: HostKVPool, batch: int
) -> tuple[list[Side], dict[str, Any]]:
    page_bytes = pool.bytes_per_page
    indices = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)
    info: dict[str, Any] = {"slab_read_misses": 0}

    def pages_for(count: int) -> list[list[memoryview]]:
        return [pool.page_segments(i * PAGE_SIZE) for i in range(count)]

    def round_keys(tag: str, round_number: int, batch_number: int) -> list[str]:
        return batches_of(keys_for(f"{tag}{round_number}", args.pages), batch)[batch_number]

    # slab: room for four rounds of pages; the warm-up fills it, so every timed write also evicts
    slab_options: dict[str, Any] = {
        "path": os.path.join(workdir, "slab"),
        "capacity_bytes": capacity_for(SLAB_ROUNDS * args.pages, page_bytes),
        "fsync": args.fsync,
        "zero_fill": not args.fresh_slab,
        "resilience": False,
    }
    if args.io_threads is not None:
        slab_options["io_threads"] = args.io_threads
    slab = HiCacheStorage(SlabBackend, make_config("bench", extra_config=slab_options))
    slab.register_mem_pool_host(pool)
    slabs = slab.backend
    assert isinstance(slabs, SlabBackend)
    info["slab_io_threads"] = slabs.io_threads
    info["slab"] = slab

    def slab_write(round_number: int, batch_number: int) -> None:
        keys = round_keys("slab", round_number, batch_number)
        if not all(slab.batch_set_v1(keys, indices[: len(keys) * PAGE_SIZE])):
            raise RuntimeError("slab write failed")

    def slab_read(round_number: int, batch_number: int) -> None:
        keys = round_keys("slab", round_number, batch_number)
        info["slab_read_misses"] += len(keys) - sum(slab.batch_get_v1(keys, indices[: len(keys) * PAGE_SIZE]))

    sides = [Side("slab", slab_write, slab_read, lambda: [(f.path, 0) for f in slabs.data_files()])]

    # raw: the same footprint as the slab (four rounds of pages) with pages at random places in it, as
    # replacement scatters them over the store's slots: the extents are laid out in a shuffled order up front
    raw = RawSlab(
        Path(workdir) / "raw",
        reserve_bytes=SLAB_ROUNDS * args.pages * page_bytes,
        threads=slabs.io_threads,
        fsync=args.fsync,
    )
    raw_sets = [batches_of(keys_for(f"raw{r}", args.pages), batch) for r in range(SLAB_ROUNDS)]
    layout = [(r, b, i) for r in range(SLAB_ROUNDS) for b, keys in enumerate(raw_sets[r]) for i in range(len(keys))]
    random.Random(0).shuffle(layout)
    for r, b, i in layout:
        raw.set([raw_sets[r][b][i]], pages_for(1))
    info["raw"] = raw

    def raw_write(round_number: int, batch_number: int) -> None:
        keys = raw_sets[round_number % SLAB_ROUNDS][batch_number]
        if not all(raw.set(keys, pages_for(len(keys)))):
            raise RuntimeError("raw write failed")

    def raw_read(round_number: int, batch_number: int) -> None:
        keys = raw_sets[round_number % SLAB_ROUNDS][batch_number]
        if not all(raw.get(keys, pages_for(len(keys)))):
            raise RuntimeError("raw read missed")

    sides.append(Side("raw", raw_write, raw_read, lambda: [(str(raw.path), 0)]))

    # file: at a size limit of four rounds of pages, which the warm-up fills (every timed write also
    # deletes the oldest page files: the steady state of a full cache, like the slab's); file_growing:
    # no limit, the directory only grows (no deletion in the write path)
    file_limit = SLAB_ROUNDS * args.pages * (page_bytes + FILE_HEADER_BYTES)
    for name, max_bytes in (("file", file_limit), ("file_growing", None)):
        root = os.path.join(workdir, name)
        sides.append(file_side(args, name, root=root, pool=pool, batch=batch, max_bytes=max_bytes, info=info))

    sglang = sglang_side(args, workdir, pool, batch)
    if isinstance(sglang, str):
        info["sglang_skipped"] = sglang
    else:
        sides.append(sglang)
    return sides, info


def file_side(
    args: argparse.Namespace,
    name: str,
    *,
    root: str,
    pool: HostKVPool,
    batch: int,
    max_bytes: int | None,
    info: dict[str, Any],
) -> Side:
    """The file backend writing fresh keys per round under ``root`` (``max_bytes``: its size limit)."""
    options: dict[str, Any] = {"path": root, "resilience": False, "fsync": args.fsync, "max_bytes": max_bytes}
    backend = HiCacheStorage(FileBackend, make_config("bench", extra_config=options))
    backend.register_mem_pool_host(pool)
    files = backend.backend
    assert isinstance(files, FileBackend)
    info["file_io_threads"] = files.io_threads
    info.setdefault("file_backends", {})[name] = backend
    indices = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)

    def keys_of(round_number: int, batch_number: int) -> list[str]:
        return batches_of(keys_for(f"{name}{round_number}", args.pages), batch)[batch_number]

    def write(round_number: int, batch_number: int) -> None:
        keys = keys_of(round_number, batch_number)
        if not all(backend.batch_set_v1(keys, indices[: len(keys) * PAGE_SIZE])):
            raise RuntimeError(f"{name} write failed")

    def read(round_number: int, batch_number: int) -> None:
        keys = keys_of(round_number, batch_number)
        if not all(backend.batch_get_v1(keys, indices[: len(keys) * PAGE_SIZE])):
            raise RuntimeError(f"{name} read missed")

    return Side(name, write, read, lambda: files_below(root))


def sglang_side(args: argparse.Namespace, workdir: str, pool: HostKVPool, batch: int) -> Side | str:
    """SGLang's HiCacheFile through its generic calls, or why it is skipped."""
    try:
        from sglang.srt.mem_cache.hicache_storage import HiCacheFile  # type: ignore[import-not-found]
    except Exception as exc:
        return f"sglang is not importable ({type(exc).__name__}: {exc})"
    root = os.path.join(workdir, "sglang")
    os.makedirs(root, exist_ok=True)
    try:
        storage = HiCacheFile(make_config("bench"), file_path=root)
    except Exception as exc:
        return f"HiCacheFile could not be built ({type(exc).__name__}: {exc})"
    values = [pool.get_data_page(i * PAGE_SIZE) for i in range(batch)]
    targets = [pool.get_dummy_flat_data_page() for _ in range(batch)]

    def keys_of(round_number: int, batch_number: int) -> list[str]:
        return batches_of(keys_for(f"sglang{round_number}", args.pages), batch)[batch_number]

    def write(round_number: int, batch_number: int) -> None:
        keys = keys_of(round_number, batch_number)
        if not storage.batch_set(keys, values[: len(keys)]):
            raise RuntimeError("HiCacheFile write failed")

    def read(round_number: int, batch_number: int) -> None:
        keys = keys_of(round_number, batch_number)
        if any(t is None for t in storage.batch_get(keys, targets[: len(keys)])):
            raise RuntimeError("HiCacheFile read missed")

    return Side("sglang", write, read, lambda: files_below(root))


def check_slab(slab: HiCacheStorage, pool: HostKVPool, batch: int, round_number: int, pages: int) -> None:
    """Untimed: what a fresh instance reads from the slab is what was written (evicted pages aside)."""
    check = HostKVPool(num_pages=batch, page_size=PAGE_SIZE, layer_num=4, head_num=8, head_dim=128, layout="page_first")
    checker = HiCacheStorage(SlabBackend, slab.config)
    checker.register_mem_pool_host(check)
    keys = keys_for(f"slab{round_number}", pages)[:batch]
    hits = checker.batch_get_v1(keys, torch.arange(len(keys) * PAGE_SIZE))
    assert sum(hits) > len(keys) // 2, "the slab lost most of the last round"
    for page, hit in enumerate(hits):
        start = page * PAGE_SIZE
        same = [bytes(a) for a in check.page_segments(start)] == [bytes(b) for b in pool.page_segments(start)]
        assert not hit or same, "the slab returned bytes other than those written"
    checker.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=512, help="distinct pages written and read per round and side")
    parser.add_argument("--batch", type=int, default=128, help="pages per batch call (SGLang sends at most 128)")
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds; medians are reported")
    parser.add_argument("--io-threads", type=int, default=None, help="slab io_threads (default: its own)")
    parser.add_argument("--fsync", action="store_true", help="durable writes on the slab, raw and file sides")
    parser.add_argument("--fresh-slab", action="store_true", help="no zero_fill: a new slab's first pass")
    parser.add_argument("--dir", default=None, help="parent directory for the data (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.batch < 1 or args.repeat < 1:
        parser.error("--pages, --batch and --repeat must be >= 1")
    batch = min(args.batch, args.pages)
    batch_count = -(-args.pages // batch)
    pool = make_pool(batch)
    page_bytes = pool.bytes_per_page
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-slab-", dir=args.dir) as workdir:
        sides, info = build_sides(args, workdir, pool, batch)
        samples = {f"{side.name}_{phase}": [] for side in sides for phase in PHASES}
        for side in sides:  # warm-up, untimed: files exist, code paths warm, the slab full
            full = side.name in ("slab", "file")  # filled to their limit: every timed write evicts
            for warm_round in range(-SLAB_ROUNDS - 1 if full else -1, 0):
                for number in range(batch_count):
                    side.write(warm_round, number)
            for number in range(batch_count):
                side.read(-1, number)
        info["slab_read_misses"] = 0
        turn = 0
        for round_number in range(args.repeat):
            for phase in PHASES:
                os.sync()  # no side pays for another's writeback
                if phase == "read_cold":
                    drop_cache([region for side in sides for region in side.regions()])
                for number in range(batch_count):
                    turn += 1
                    order = sides[turn % len(sides) :] + sides[: turn % len(sides)]
                    for side in order:
                        begin = time.perf_counter()
                        side.run(phase, round_number, number)
                        samples[f"{side.name}_{phase}"].append(time.perf_counter() - begin)
        slab: HiCacheStorage = info["slab"]
        check_slab(slab, pool, batch, args.repeat - 1, args.pages)
        stats = slab.get_stats()
        slab.close()
        file_evictions = {}
        for name, backend in info["file_backends"].items():
            file_evictions[name] = backend.get_stats()["counters"].get("evictions", 0)
            backend.close()
        info["raw"].close()

    batch_bytes = batch * page_bytes
    medians = {name: statistics.median(values) for name, values in samples.items()}

    def ratio(ours: str, theirs: str) -> float:
        """Median over batches of their time / our time (ours / theirs in throughput)."""
        return round(statistics.median(t / o for o, t in zip(samples[ours], samples[theirs], strict=True)), 3)

    result: dict[str, Any] = {
        "pages": args.pages,
        "batch": batch,
        "page_bytes": page_bytes,
        "repeat": args.repeat,
        "fsync": args.fsync,
        "fresh_slab": args.fresh_slab,
        "slab_io_threads": info["slab_io_threads"],
        "file_io_threads": info["file_io_threads"],
        "sides": [side.name for side in sides],
        "sglang_skipped": info.get("sglang_skipped"),
        "median_batch_seconds": {k: round(v, 6) for k, v in medians.items()},
        "gbps": {k: round(batch_bytes / v / 1e9, 3) for k, v in medians.items()},
        "ratios": {},
        "slab_read_misses": info["slab_read_misses"],
        "slab_counters": stats["counters"],
        "slab_faults": stats["faults"],
        "file_evictions": file_evictions,
        "samples_seconds": {k: [round(x, 6) for x in v] for k, v in samples.items()},
    }
    for phase in PHASES:
        result["ratios"][f"slab/raw {phase}"] = ratio(f"slab_{phase}", f"raw_{phase}")
        for other in ("file", "file_growing", "sglang"):
            if f"{other}_{phase}" in samples:
                result["ratios"][f"slab/{other} {phase}"] = ratio(f"slab_{phase}", f"{other}_{phase}")
                result["ratios"][f"{other}/raw {phase}"] = ratio(f"{other}_{phase}", f"raw_{phase}")
    lines = [
        f"{args.pages} pages x {page_bytes // 1024} KiB per round and side, batch {batch}, {args.repeat} rounds, "
        f"{args.repeat * batch_count} batches per phase (medians), slab io_threads {info['slab_io_threads']}, "
        f"fsync {args.fsync}, slab {'fresh (fallocated)' if args.fresh_slab else 'zero-filled'}",
    ]
    for phase in PHASES:
        figures = "  ".join(f"{s.name} {result['gbps'][f'{s.name}_{phase}']:.2f}" for s in sides)
        lines.append(f"  {phase:<9} GB/s: {figures}")
    lines += [f"  {name}: {value:.3f}" for name, value in result["ratios"].items()]
    lines.append(f"  slab reads that missed: {info['slab_read_misses']}")
    lines.append(f"  page files the file sides deleted at their size limit: {file_evictions}")
    if info.get("sglang_skipped"):
        lines.append(f"  sglang side skipped: {info['sglang_skipped']}")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "machine": describe()}, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
