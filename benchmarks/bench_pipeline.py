"""Benchmark of the buffer-only pipeline (not a test).

1. Bookkeeping cost per page: backup + load-back cycles of 64-page spans (each page written once and
   read back once) on tiny pages so that moving bytes costs next to nothing, with
   - the ``sim`` backend at unbounded bandwidth and zero latency (storing bytes, and ``keys_only``);
     the time inside storage calls (SDK validation and key mapping + sim) is timed by the
     pipeline's own stage metrics in the same run and shown separately;
   - a storage stub that answers at once, which leaves the pipeline's own work alone;
   - the same stub with a SWA component (window of 2 pages) and a Mamba component (one state per
     span) beside KV, interleaved with the KV-only stub runs; the figure is per KV page and the
     ratio is hybrid / KV-only of the same repetition (median over repetitions).
   Each timed loop starts after a full garbage collection, so a collection owed by earlier work
   (imports, the previous runs) is not charged to it; collections the loop itself causes are.
2. Staging copy throughput: ``CopyEngine`` device→host copies against ``torch.index_select`` of the
   same pages in the same run (as a plain call, which allocates its output, and into a buffer
   allocated once), for pages laid out back to back (what the allocators hand out) and for
   scattered pages.

Usage: ``python benchmarks/bench_pipeline.py [--reps 7] [--cycles 200] [--json out.json]``
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

import torch
from machine import describe

from hicache_storage import PoolTransferResult, load_backend, make_config, page_hashes
from hicache_storage.pipeline import (
    BufferOnlyPipeline,
    CopyEngine,
    DeviceKVPool,
    DeviceStatePool,
    MambaComponent,
    PipelineConfig,
    PoolSet,
    PrefetchRequest,
    Span,
    SWAComponent,
)

SPAN_PAGES = 64


class InstantStorage:
    """Answers every storage call at once with success (isolates the pipeline's own cost)."""

    mem_pool_host: Any = None

    def register_mem_pool_host(self, pool: Any) -> None:
        self.mem_pool_host = pool

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        return len(keys)

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return [True] * len(keys)

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return [True] * len(keys)

    def register_mem_host_pool_v2(self, pool: Any, name: Any) -> None:
        pass

    def on_host_pools_registered(self) -> None:
        pass

    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        hits = {"kv": len(keys), **{t.name: len(keys) for t in pool_transfers or ()}}
        return PoolTransferResult(len(keys), hits, list(range(1, len(keys) + 1)))

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return {t.name: [True] * len(t.keys) for t in transfers}

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        return {t.name: [True] * len(t.keys) for t in transfers}


def _hybrid_pools(device: DeviceKVPool) -> PoolSet:
    """KV plus a SWA window of 2 pages and Mamba state (tiny units, like the KV pages)."""
    swa = DeviceKVPool(num_pages=2 * SPAN_PAGES, page_size=1, layer_num=1, head_num=1, head_dim=8, dtype="float32")
    state = DeviceStatePool(num_slots=8, layer_num=1, temporal_shape=(8,), conv_shapes=((4,),), conv_dtype="float32")
    return PoolSet(device, [SWAComponent(swa, window_pages=2), MambaComponent(state)])


def bookkeeping(cycles: int, backend: str) -> dict[str, float]:
    """Microseconds per (KV) page of one backup + load-back cycle, total and inside storage calls."""
    device = DeviceKVPool(num_pages=2 * SPAN_PAGES, page_size=1, layer_num=1, head_num=1, head_dim=8, dtype="float32")
    storage: Any
    hybrid = backend == "instant_hybrid"
    if backend.startswith("instant"):
        storage = InstantStorage()
    else:
        keys_only = backend == "sim_keys_only"
        extra = {"sim_write_gbps": 1e9, "sim_op_latency_us": 0, "keys_only": keys_only, "resilience": False}
        storage = load_backend("sim", make_config("bench", extra_config=extra))
    pools = _hybrid_pools(device) if hybrid else PoolSet(device)
    pipe = BufferOnlyPipeline(PipelineConfig(), pools, storage)
    hashes = page_hashes(list(range(SPAN_PAGES * (cycles + 1))), 1)
    slots = device.alloc(SPAN_PAGES, owner="engine")
    assert slots is not None
    sidecars: dict[str, torch.Tensor] = {}
    for component in pools.sidecars:  # the span's trailing window / end state, held by the engine
        units = component.device.alloc(component.window * component.unit_tokens, owner="engine")
        assert units is not None
        sidecars[component.name] = units

    def cycle(number: int) -> None:
        span_hashes = hashes[number * SPAN_PAGES : (number + 1) * SPAN_PAGES]
        pipe.enqueue_backup(Span(number, span_hashes, slots, sidecars=sidecars))
        pipe.tick()
        pipe.poll_backups()
        pipe.prefetch(PrefetchRequest(f"r{number}", span_hashes))
        pipe.tick()
        admission = pipe.admit(f"r{number}", 0)
        device.free(admission.device_indices)
        for component in pools.sidecars:
            component.device.free(admission.sidecars[component.name])
        pipe.poll_prefetches()

    cycle(cycles)  # warm-up on the spare span
    gc.collect()  # no collection owed by earlier work (imports, other runs) lands in the timed loop
    before = _storage_seconds(pipe)
    begin = time.perf_counter()
    for number in range(cycles):
        cycle(number)
    total = time.perf_counter() - begin
    inside = _storage_seconds(pipe) - before
    metrics = pipe.metrics.as_dict()
    assert metrics["prefetch_loaded_tokens"] == (cycles + 1) * SPAN_PAGES, "every cycle must load its span"
    pipe.drain()
    pipe.check_invariants()
    pages = cycles * SPAN_PAGES
    return {"total_us_per_page": total / pages * 1e6, "storage_us_per_page": inside / pages * 1e6}


def _report(results: dict[str, Any], backend: str, runs: list[dict[str, float]]) -> None:
    row = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    row["outside_storage_us_per_page"] = row["total_us_per_page"] - row["storage_us_per_page"]
    results[f"bookkeeping_{backend}"] = row
    print(
        f"cycle on {backend:14s} {row['total_us_per_page']:6.2f} us/page "
        f"(inside storage calls {row['storage_us_per_page']:5.2f}, "
        f"outside {row['outside_storage_us_per_page']:5.2f}; goal <= 10)"
    )


def _storage_seconds(pipe: BufferOnlyPipeline) -> float:
    latency = pipe.metrics.as_dict()["latency"]
    return float(sum(latency[stage]["sum_s"] for stage in ("exists", "read", "write")))


def copy_throughput(pattern: str, reps: int, inner: int) -> dict[str, float]:
    """GB/s of CopyEngine device→host and of index_select over the same pages (medians)."""
    device = DeviceKVPool(
        num_pages=4 * SPAN_PAGES, page_size=64, layer_num=4, head_num=8, head_dim=128, dtype="bfloat16"
    )
    host = device.host_pool(2 * SPAN_PAGES)
    engine = CopyEngine(device, host)
    device.kv_buffer.normal_()
    generator = torch.Generator().manual_seed(0)
    if pattern == "contiguous":
        src = list(range(10, 10 + SPAN_PAGES))
        dst = list(range(3, 3 + SPAN_PAGES))
    else:
        src = torch.randperm(device.page_num, generator=generator)[:SPAN_PAGES].tolist()
        dst = torch.randperm(host.page_num, generator=generator)[:SPAN_PAGES].tolist()
    index = torch.tensor(src)
    nbytes = SPAN_PAGES * device.bytes_per_page

    def ours() -> None:
        engine.device_to_host(src, dst).wait()

    def baseline() -> None:
        device.pages.index_select(1, index)

    out = torch.empty(device.pages.shape[0], SPAN_PAGES, device.pages.shape[2], dtype=device.dtype)

    def baseline_out() -> None:  # the same gather into a buffer allocated once (no page faults)
        torch.index_select(device.pages, 1, index, out=out)

    times: dict[str, list[float]] = {"ours": [], "base": [], "base_out": []}
    for _ in range(reps):  # interleaved so all see the same machine state
        times["ours"].append(_timed(ours, inner))
        times["base"].append(_timed(baseline, inner))
        times["base_out"].append(_timed(baseline_out, inner))
    gbps = {name: nbytes / statistics.median(values) / 1e9 for name, values in times.items()}
    return {
        "copy_gbps": gbps["ours"],
        "index_select_gbps": gbps["base"],
        "index_select_out_gbps": gbps["base_out"],
        "ratio": gbps["ours"] / gbps["base"],
        "ratio_vs_out": gbps["ours"] / gbps["base_out"],
    }


def _timed(function: Any, inner: int) -> float:
    function()
    begin = time.perf_counter()
    for _ in range(inner):
        function()
    return (time.perf_counter() - begin) / inner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    results: dict[str, Any] = {"span_pages": SPAN_PAGES, "reps": args.reps, "torch_threads": torch.get_num_threads()}
    for backend in ("sim", "sim_keys_only"):
        runs = [bookkeeping(args.cycles, backend) for _ in range(args.reps)]
        _report(results, backend, runs)
    # KV-only and hybrid on the instant stub, interleaved so both see the same machine state.
    paired = [
        (bookkeeping(args.cycles, "instant"), bookkeeping(args.cycles, "instant_hybrid")) for _ in range(args.reps)
    ]
    _report(results, "instant", [kv for kv, _ in paired])
    _report(results, "instant_hybrid", [hy for _, hy in paired])
    ratio = statistics.median(hy["total_us_per_page"] / kv["total_us_per_page"] for kv, hy in paired)
    results["hybrid_over_kv_only"] = ratio
    print(f"hybrid (KV + SWA + Mamba) / KV-only bookkeeping per KV page: {ratio:.2f}x (median of paired runs)")
    for pattern in ("contiguous", "scattered"):
        row = copy_throughput(pattern, args.reps, inner=5)
        results[f"copy_{pattern}"] = row
        print(
            f"staging copy {pattern:10s} {row['copy_gbps']:6.2f} GB/s vs index_select {row['index_select_gbps']:6.2f} "
            f"GB/s: ratio {row['ratio']:.2f} (goal >= 0.7); vs index_select into a preallocated buffer "
            f"{row['index_select_out_gbps']:.2f} GB/s: ratio {row['ratio_vs_out']:.2f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({**results, "machine": describe()}, handle, indent=2)


if __name__ == "__main__":
    main()
