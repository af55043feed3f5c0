"""Benchmark: the slab backend against the physical baseline, the file backend and SGLang's HiCacheFile.

Same pages for every side, one run, sides interleaved (the order alternates per round), medians:

- ``slab``: ``SlabBackend.batch_set_v1`` / ``batch_get_v1`` (integrity checks on: every write
  checksums, every read verifies key, length and checksum). Each round writes fresh keys, as an
  engine does, into a slab of four rounds' pages that the warm-up has filled: every write evicts
  (steady state of a full cache). A key evicted by a later key of its own round reads as a miss
  (counted in the results; rare with 8 slots per set).
- ``raw``: the physical baseline, ``os.pwritev`` of each page's segments into a preallocated file and
  ``os.preadv`` back into them (``RawSlab``, same thread count as the slab): no header, no checksum,
  no index. Its file has the slab's footprint (four rounds of pages) with the pages at random places
  in it, as hashing places them in the slab; the rounds cycle over the four sets of extents.
- ``file``: ``FileBackend.batch_set_v1`` / ``batch_get_v1`` (one file per page, fresh keys per round).
- ``sglang``: SGLang's ``HiCacheFile`` through its generic ``batch_set`` / ``batch_get`` (one flat
  tensor per page), only when ``sglang`` is importable; skipped otherwise.

Pages are 512 KiB (MHA ``page_first`` bf16), in batches of ``--batch``. Reads are timed twice per
round: page cache warm (the pages were just written or read), and cold: before the timed run the
side's data is written back (``os.sync``) and dropped from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)``: every page file of ``file`` and ``sglang``, the raw file,
and the slot area of the slab files (the slot headers, 64 bytes per slot, stay cached as they do in
use, like the file backends' directory entries and inodes, which ``DONTNEED`` does not drop). Writes
go to the page cache (``--fsync`` makes the slab, raw and file sides durable before they return).
Ratios are throughput ratios: ours / theirs (>= 1: ours is faster).

    python benchmarks/bench_slab.py --pages 512 --repeat 7 [--dir /var/tmp] [--json out.json]
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
from hicache_storage_file import FileBackend
from hicache_storage_slab import SlabBackend
from hicache_storage_slab.raw_baseline import RawSlab

from hicache_storage import HostKVPool, make_config

PAGE_SIZE = 32  # tokens; 4 layers x 8 heads x 128 dims x bf16 x (K, V) x 32 tokens = 512 KiB
SLAB_ROUNDS = 4  # the slab holds this many rounds of pages
Run = Callable[[], None]


def make_pool(batch: int) -> HostKVPool:
    pool = HostKVPool(
        num_pages=batch,
        page_size=PAGE_SIZE,
        layer_num=4,
        head_num=8,
        head_dim=128,
        dtype="bfloat16",
        layout="page_first",
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(0)))
    return pool


def keys_for(tag: str, count: int) -> list[str]:
    return [hashlib.sha256(f"{tag}-{i}".encode()).hexdigest() for i in range(count)]


def batches_of(keys: list[str], batch: int) -> list[list[str]]:
    return [keys[i : i + batch] for i in range(0, len(keys), batch)]


def drop_cache(regions: list[tuple[str, int]]) -> None:
    """Write back, then evict these (file, from offset) regions from the page cache."""
    os.sync()
    for path, offset in regions:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, offset, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def files_below(directory: str) -> list[tuple[str, int]]:
    return [(os.path.join(root, name), 0) for root, _dirs, names in os.walk(directory) for name in names]


class Side:
    """One contender: write the round's keys, read them back, and the files to drop for a cold read."""

    def __init__(
        self, name: str, write: Callable[[int], None], read: Callable[[int], None], files: Callable[[], list[str]]
    ):
        self.name = name
        self.write = write
        self.read = read
        self.files = files


def timed(run: Run) -> float:
    time.sleep(0.02)  # untimed settle: let the previous side's background work drain
    begin = time.perf_counter()
    run()
    return time.perf_counter() - begin


def build_sides(
    args: argparse.Namespace, workdir: str, pool: HostKVPool, batch: int
) -> tuple[list[Side], dict[str, Any]]:
    page_bytes = pool.bytes_per_page
    indices = torch.arange(batch * PAGE_SIZE, dtype=torch.int64)
    info: dict[str, Any] = {}

    def pages_for(count: int) -> list[list[memoryview]]:
        return [pool.page_segments(i * PAGE_SIZE) for i in range(count)]

    # slab: room for four rounds of pages; the warm-up fills it, so every timed write also evicts
    slab_options: dict[str, Any] = {
        "path": os.path.join(workdir, "slab"),
        "capacity_bytes": SLAB_ROUNDS * args.pages * (page_bytes + 64) + (1 << 20),
        "fsync": args.fsync,
        "resilience": False,
    }
    if args.io_threads is not None:
        slab_options["io_threads"] = args.io_threads
    slab = SlabBackend(make_config("bench", extra_config=slab_options))
    slab.register_mem_pool_host(pool)
    info["slab_io_threads"] = slab.io_threads
    info["slab"] = slab

    def slab_write(round_number: int) -> None:
        for keys in batches_of(keys_for(f"slab{round_number}", args.pages), batch):
            if not all(slab.batch_set_v1(keys, indices[: len(keys) * PAGE_SIZE])):
                raise RuntimeError("slab write failed")

    info["slab_read_misses"] = 0

    def slab_read(round_number: int) -> None:
        for keys in batches_of(keys_for(f"slab{round_number}", args.pages), batch):
            info["slab_read_misses"] += len(keys) - sum(slab.batch_get_v1(keys, indices[: len(keys) * PAGE_SIZE]))

    data_offset = slab.slab(slab.pool_keyspace()).geometry.data_offset
    sides = [Side("slab", slab_write, slab_read, lambda: [(f.path, data_offset) for f in slab.slab_files()])]

    # raw: the same footprint as the slab (four rounds of pages) with pages at random places in it, as
    # hashing places them in the slab: the warm-up lays the extents out in a shuffled order
    raw = RawSlab(
        Path(workdir) / "raw",
        reserve_bytes=SLAB_ROUNDS * args.pages * page_bytes,
        threads=slab.io_threads,
        fsync=args.fsync,
    )
    raw_sets = [keys_for(f"raw{r}", args.pages) for r in range(SLAB_ROUNDS)]
    layout = [(r, i) for r in range(SLAB_ROUNDS) for i in range(args.pages)]
    random.Random(0).shuffle(layout)
    for r, i in layout:
        raw.set([raw_sets[r][i]], pages_for(1))
    info["raw"] = raw

    def raw_write(round_number: int) -> None:
        for keys in batches_of(raw_sets[round_number % SLAB_ROUNDS], batch):
            if not all(raw.set(keys, pages_for(len(keys)))):
                raise RuntimeError("raw write failed")

    def raw_read(round_number: int) -> None:
        for keys in batches_of(raw_sets[round_number % SLAB_ROUNDS], batch):
            if not all(raw.get(keys, pages_for(len(keys)))):
                raise RuntimeError("raw read missed")

    sides.append(Side("raw", raw_write, raw_read, lambda: [(str(raw.path), 0)]))

    file_root = os.path.join(workdir, "file")
    file_options = {"path": file_root, "resilience": False, "fsync": args.fsync}
    file_backend = FileBackend(make_config("bench", extra_config=file_options))
    file_backend.register_mem_pool_host(pool)
    info["file_io_threads"] = file_backend.io_threads
    info["file"] = file_backend

    def file_write(round_number: int) -> None:
        for keys in batches_of(keys_for(f"file{round_number}", args.pages), batch):
            if not all(file_backend.batch_set_v1(keys, indices[: len(keys) * PAGE_SIZE])):
                raise RuntimeError("file write failed")

    def file_read(round_number: int) -> None:
        for keys in batches_of(keys_for(f"file{round_number}", args.pages), batch):
            if not all(file_backend.batch_get_v1(keys, indices[: len(keys) * PAGE_SIZE])):
                raise RuntimeError("file read missed")

    sides.append(Side("file", file_write, file_read, lambda: files_below(file_root)))

    sglang = sglang_side(args, workdir, pool, batch)
    if isinstance(sglang, str):
        info["sglang_skipped"] = sglang
    else:
        sides.append(sglang)
    return sides, info


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

    def write(round_number: int) -> None:
        for keys in batches_of(keys_for(f"sglang{round_number}", args.pages), batch):
            if not storage.batch_set(keys, values[: len(keys)]):
                raise RuntimeError("HiCacheFile write failed")

    def read(round_number: int) -> None:
        for keys in batches_of(keys_for(f"sglang{round_number}", args.pages), batch):
            if any(t is None for t in storage.batch_get(keys, targets[: len(keys)])):
                raise RuntimeError("HiCacheFile read missed")

    return Side("sglang", write, read, lambda: files_below(root))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=512, help="distinct pages written and read per round and side")
    parser.add_argument("--batch", type=int, default=128, help="pages per batch call (SGLang sends at most 128)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds; medians are reported")
    parser.add_argument("--io-threads", type=int, default=None, help="slab io_threads (default: its own)")
    parser.add_argument("--fsync", action="store_true", help="durable writes on the slab, raw and file sides")
    parser.add_argument("--dir", default=None, help="parent directory for the data (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.batch < 1 or args.repeat < 1:
        parser.error("--pages, --batch and --repeat must be >= 1")
    batch = min(args.batch, args.pages)
    pool = make_pool(batch)
    page_bytes = pool.bytes_per_page
    with tempfile.TemporaryDirectory(prefix="bench-slab-", dir=args.dir) as workdir:
        sides, info = build_sides(args, workdir, pool, batch)
        for side in sides:  # warm-up, untimed: files exist, code paths warm, the slab full
            for warm_round in range(-SLAB_ROUNDS - 1 if side.name == "slab" else -1, 0):
                side.write(warm_round)
            side.read(-1)
        info["slab_read_misses"] = 0
        samples: dict[str, list[float]] = {
            f"{side.name}_{what}": [] for side in sides for what in ("write", "read_warm", "read_cold")
        }
        for round_number in range(args.repeat):
            order = sides if round_number % 2 == 0 else sides[::-1]
            for side in order:
                os.sync()  # no side pays for another's writeback
                samples[f"{side.name}_write"].append(timed(lambda s=side, r=round_number: s.write(r)))
            for side in order:
                samples[f"{side.name}_read_warm"].append(timed(lambda s=side, r=round_number: s.read(r)))
            for side in order:
                drop_cache(side.files())
                samples[f"{side.name}_read_cold"].append(timed(lambda s=side, r=round_number: s.read(r)))
        slab: SlabBackend = info["slab"]
        # Untimed check that what the slab returned is what was written.
        check = HostKVPool(
            num_pages=batch, page_size=PAGE_SIZE, layer_num=4, head_num=8, head_dim=128, layout="page_first"
        )
        checker = SlabBackend(slab.config)
        checker.register_mem_pool_host(check)
        keys = keys_for(f"slab{args.repeat - 1}", args.pages)[:batch]
        hits = checker.batch_get_v1(keys, torch.arange(len(keys) * PAGE_SIZE))
        assert sum(hits) > len(keys) // 2, "the slab lost most of the last round"
        for page, hit in enumerate(hits):
            start = page * PAGE_SIZE
            same = [bytes(a) for a in check.page_segments(start)] == [bytes(b) for b in pool.page_segments(start)]
            assert not hit or same, "the slab returned bytes other than those written"
        checker.close()
        stats = slab.get_stats()
        slab.close()
        info["file"].close()
        info["raw"].close()

    total = args.pages * page_bytes
    medians = {name: statistics.median(values) for name, values in samples.items()}

    def ratio(ours: str, theirs: str) -> float:
        return round(medians[theirs] / medians[ours], 3)

    result: dict[str, Any] = {
        "pages": args.pages,
        "batch": batch,
        "page_bytes": page_bytes,
        "repeat": args.repeat,
        "fsync": args.fsync,
        "slab_io_threads": info["slab_io_threads"],
        "file_io_threads": info["file_io_threads"],
        "sides": [side.name for side in sides],
        "sglang_skipped": info.get("sglang_skipped"),
        "median_seconds": {k: round(v, 6) for k, v in medians.items()},
        "gbps": {k: round(total / v / 1e9, 3) for k, v in medians.items()},
        "ratios": {},
        "samples_seconds": {k: [round(x, 6) for x in v] for k, v in samples.items()},
        "slab_read_misses": info["slab_read_misses"],
        "slab_counters": stats["counters"],
        "slab_faults": stats["faults"],
    }
    for what in ("write", "read_warm", "read_cold"):
        result["ratios"][f"slab/raw {what}"] = ratio(f"slab_{what}", f"raw_{what}")
        for other in ("file", "sglang"):
            if f"{other}_{what}" in medians:
                result["ratios"][f"slab/{other} {what}"] = ratio(f"slab_{what}", f"{other}_{what}")
                result["ratios"][f"{other}/raw {what}"] = ratio(f"{other}_{what}", f"raw_{what}")
    lines = [
        f"{args.pages} pages x {page_bytes // 1024} KiB per round and side, batch {batch}, {args.repeat} rounds "
        f"(medians), slab io_threads {info['slab_io_threads']}, fsync {args.fsync}",
    ]
    for what in ("write", "read_warm", "read_cold"):
        figures = "  ".join(f"{s.name} {result['gbps'][f'{s.name}_{what}']:.2f}" for s in sides)
        lines.append(f"  {what:<9} GB/s: {figures}")
    lines += [f"  {name}: {value:.3f}" for name, value in result["ratios"].items()]
    lines.append(f"  slab reads that missed (evicted by a later page of their round): {info['slab_read_misses']}")
    if info.get("sglang_skipped"):
        lines.append(f"  sglang side skipped: {info['sglang_skipped']}")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
