"""Where a warm slab read's time goes: the same cached slots read by ever more complete paths.

Writes ``--pages`` pages of 512 KiB into a slab, then reads the same slots, with the page cache
warm, in five ways, each timed per batch of all the pages on 1 and on ``--threads`` threads
(pages split into contiguous runs, one per thread), interleaved batch by batch, medians:

- ``preadv``: ``os.preadv`` of each page's segments from its slot (what the raw baseline does);
- ``preadv+xxh3``: the same, then XXH3 of the bytes read (the least any full-page check costs
  after the kernel's copy);
- ``mapped+xxh3``: ``memmove`` out of a shared mapping of the slab file, then XXH3 (a user-space
  copy leaves the page in the CPU cache; not a path the backend takes: an I/O error there is a
  ``SIGBUS``, not an error);
- ``Store.read``: the backend's read of one page (key digest, index lookup, ``preadv``, XXH3, checks);
- ``batch_get_v1``: the whole call (threads are the backend's own ``io_threads``).

Reported: microseconds per page, and each path's throughput as a ratio to ``preadv`` on the same
thread count and to ``preadv+xxh3`` (the ceiling of a verified read through ``preadv``), both from
the medians; and ``batch_get_v1`` against the ceiling as the median (min, max) over rounds of the
ratio within a round, where the two ran back to back (a disturbance from outside hits both).

    python benchmarks/slab_read_ceiling.py [--pages 128] [--threads 2] [--repeat 41] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
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
from hicache_storage_slab import SlabBackend
from hicache_storage_slab.geometry import capacity_for
from hicache_storage_slab.page_io import page_checksum
from machine import describe

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.plugin.io_threads import IoThreads

PageRead = Callable[[int], None]  # read page number i
SEED_DIGEST = bytes(range(16))  # any key digest: the checksum's seed, as the slab derives it


def split_runs(count: int, threads: IoThreads, read: PageRead) -> Callable[[], None]:
    """One batch: pages ``0..count`` over the slab's own I/O threads (contiguous runs, the caller first)."""
    numbers = range(count)

    def batch() -> None:
        threads.map(lambda page, _unused: read(page), numbers, numbers)

    return batch


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=128, help="pages written once and read in every batch")
    parser.add_argument("--threads", type=int, default=2, help="thread count besides 1 (the slab's io_threads)")
    parser.add_argument("--repeat", type=int, default=41, help="batches per path and thread count")
    parser.add_argument("--dir", default=None, help="parent directory for the slab (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.pages < 1 or args.threads < 1 or args.repeat < 1:
        parser.error("--pages, --threads and --repeat must be >= 1")
    pool = make_pool(args.pages)
    pages = [pool.page_segments(i * PAGE_SIZE) for i in range(args.pages)]
    indices = torch.arange(args.pages * PAGE_SIZE, dtype=torch.int64)
    keys = [f"ceiling-{i}" for i in range(args.pages)]
    counts = sorted({1, args.threads})
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="slab-ceiling-", dir=args.dir) as workdir:
        backends = {}
        for threads in counts:
            options = {"path": workdir, "capacity_bytes": capacity_for(2 * args.pages, pool.bytes_per_page)}
            backend = HiCacheStorage(SlabBackend, make_config("bench", extra_config={**options, "io_threads": threads}))
            backend.register_mem_pool_host(pool)
            backends[threads] = backend
        writer = backends[counts[0]]
        if not all(writer.batch_set_v1(keys, indices)):
            raise RuntimeError("slab write failed")
        slabs = writer.backend
        assert isinstance(slabs, SlabBackend)
        store = slabs.store(create=False)
        assert store is not None
        storage_keys = writer.pool_keyspace().storage_keys(keys)
        where = [store.locate(key) for key in storage_keys]
        if any(found is None or len(found[1]) != 1 for found in where):
            raise RuntimeError("a page just written is missing or stored in several chunks")
        slots = [(found[1][0][0].fd, found[1][0][1]) for found in where if found is not None]
        # read-write only because ctypes takes addresses of writable buffers; nothing stores into it
        maps = {fd: mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) for fd, _ in slots}
        anchors = {fd: ctypes.c_char.from_buffer(view) for fd, view in maps.items()}
        bases = {fd: ctypes.addressof(anchor) for fd, anchor in anchors.items()}
        targets = [[ctypes.addressof(ctypes.c_char.from_buffer(segment)) for segment in page] for page in pages]

        def preadv(i: int) -> None:
            os.preadv(slots[i][0], pages[i], slots[i][1])

        def preadv_hash(i: int) -> None:
            os.preadv(slots[i][0], pages[i], slots[i][1])
            page_checksum(pages[i], SEED_DIGEST)

        def mapped_hash(i: int) -> None:
            fd, offset = slots[i]
            source = bases[fd] + offset
            for segment, target in zip(pages[i], targets[i], strict=True):
                ctypes.memmove(target, source, segment.nbytes)
                source += segment.nbytes
            page_checksum(pages[i], SEED_DIGEST)

        def slab_read(i: int) -> None:
            if not store.read([storage_keys[i]], [pages[i]]) == [True]:
                raise RuntimeError("Store.read missed a page just written")

        paths: dict[str, Callable[[], None]] = {}
        pools = {threads: IoThreads(threads) for threads in counts}
        for threads in counts:
            for name, read in (
                ("preadv", preadv),
                ("preadv+xxh3", preadv_hash),
                ("mapped+xxh3", mapped_hash),
                ("Store.read", slab_read),
            ):
                paths[f"{name} {threads}"] = split_runs(args.pages, pools[threads], read)
            backend = backends[threads]
            paths[f"batch_get_v1 {threads}"] = lambda backend=backend: _check(backend.batch_get_v1(keys, indices))
        for batch in paths.values():  # warm-up: page cache, mapping, code paths
            batch()
        samples = {name: [] for name in paths}
        for _ in range(args.repeat):
            for name, batch in paths.items():
                begin = time.perf_counter()
                batch()
                samples[name].append(time.perf_counter() - begin)
        anchors.clear()
        for view in maps.values():
            view.close()
        for backend in backends.values():
            backend.close()
        for threads_pool in pools.values():
            threads_pool.close()
    per_page = {name: statistics.median(values) / args.pages * 1e6 for name, values in samples.items()}
    in_round = {
        threads: sorted(
            ceiling / ours
            for ceiling, ours in zip(samples[f"preadv+xxh3 {threads}"], samples[f"batch_get_v1 {threads}"], strict=True)
        )
        for threads in counts
    }
    result: dict[str, Any] = {
        "pages": args.pages,
        "page_bytes": pool.bytes_per_page,
        "repeat": args.repeat,
        "threads": counts,
        "us_per_page": {name: round(value, 1) for name, value in per_page.items()},
        "ratio_to_preadv": {
            name: round(per_page[f"preadv {name.rsplit(' ', 1)[1]}"] / v, 3) for name, v in per_page.items()
        },
        "ratio_to_verified_ceiling": {
            name: round(per_page[f"preadv+xxh3 {name.rsplit(' ', 1)[1]}"] / v, 3) for name, v in per_page.items()
        },
        "batch_get_v1_to_ceiling_per_round": {
            str(threads): {
                "median": round(statistics.median(ratios), 3),
                "min": round(ratios[0], 3),
                "max": round(ratios[-1], 3),
            }
            for threads, ratios in in_round.items()
        },
    }
    width = max(len(name.rsplit(" ", 1)[0]) for name in per_page)
    lines = [f"{args.pages} cached pages x {pool.bytes_per_page // 1024} KiB, {args.repeat} batches per path (medians)"]
    lines.append(f"  {'path':<{width}}  " + "  ".join(f"{t} thread(s): us/page  ratio" for t in counts))
    for name in dict.fromkeys(n.rsplit(" ", 1)[0] for n in per_page):
        cells = [f"{per_page[f'{name} {t}']:>18.1f}  {result['ratio_to_preadv'][f'{name} {t}']:.3f}" for t in counts]
        lines.append(f"  {name:<{width}}  " + "  ".join(cells))
    lines.append(
        "  batch_get_v1 / preadv+xxh3 (the verified-read ceiling): "
        + ", ".join(f"{t} thread(s) {result['ratio_to_verified_ceiling'][f'batch_get_v1 {t}']:.3f}" for t in counts)
    )
    cells = []
    for t, spread in result["batch_get_v1_to_ceiling_per_round"].items():
        cells.append(f"{t} thread(s) {spread['median']:.3f} ({spread['min']:.3f}-{spread['max']:.3f})")
    lines.append("  the same, median (min-max) over rounds of the ratio within a round: " + ", ".join(cells))
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "machine": describe()}, indent=2) + "\n")
    return result


def _check(hits: list[bool]) -> None:
    if not all(hits):
        raise RuntimeError("batch_get_v1 missed a page just written")


if __name__ == "__main__":
    main(sys.argv[1:])
