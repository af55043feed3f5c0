"""Microbenchmark a backend: set/get/exists throughput and latency, next to its raw client.

Raw baseline: a backend names a :class:`~hicache_storage.plugin.RawBaseline` class in
``raw_baseline_class`` (see :mod:`hicache_storage.plugin.raw_baseline`), doing the same work with
the backend's own client and none of the SDK (no key space, no validation, no page format).
Backends without one show "no raw baseline".

Fairness: each side first runs one untimed set, exists and get on a batch of separate warm-up keys
(connections, lazy set-up, caches). Then, batch by batch, the SDK call and the raw call of the same
pages run back to back, and which goes first alternates from one pair to the next. The ratio of an
operation is the median over pairs of raw seconds / SDK seconds, i.e. our throughput over the raw
client's (>= 1.0: the SDK is as fast); a slow outlier or load drifting over the run hardly moves it.
``ratio_of_totals`` (total raw time / total SDK time) is reported next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from ..config import HiCacheStorageConfig, make_config
from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..plugin.backend import Backend
from ..plugin.raw_baseline import RawClient, raw_baseline_for
from ..registry import load_backend, resolve_backend
from .arguments import positive_int
from .store_access import check_store

__all__ = ["OpResult", "RawClient", "add_arguments", "main", "run_bench"]

_PAGE_TOKENS = 64
OPS = ("set", "exists", "get")


@dataclass
class OpResult:
    """One operation's timings (seconds per batch call) and bytes moved."""

    op: str
    pages: int
    nbytes: int
    latencies: list[float] = field(default_factory=list)
    ok: int = 0

    @property
    def seconds(self) -> float:
        return sum(self.latencies)

    def summary(self) -> dict[str, float]:
        lat = np.asarray(self.latencies or [0.0], dtype=np.float64) * 1e3
        p50, p90, p99 = np.percentile(lat, (50, 90, 99))
        secs = self.seconds
        return {
            "calls": len(self.latencies),
            "pages": self.pages,
            "ok": self.ok,
            "seconds": secs,
            "gb_per_s": self.nbytes / secs / 1e9 if secs and self.nbytes else 0.0,
            "pages_per_s": self.pages / secs if secs else 0.0,
            "p50_ms": float(p50),
            "p90_ms": float(p90),
            "p99_ms": float(p99),
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``bench`` sub-command's arguments."""
    parser.add_argument("backend", help="backend name or module:Class")
    parser.add_argument("--config", help="backend options (extra_config) as JSON or @file")
    parser.add_argument("--page-bytes", type=positive_int, default=65536, help="bytes per page (multiple of 128)")
    parser.add_argument("--pages", type=positive_int, default=1024, help="pages written, checked and read")
    parser.add_argument("--batch", type=positive_int, default=128, help="pages per call")
    parser.add_argument("--json", help="also write the results to this JSON file")


def _pool(page_bytes: int, pages: int) -> HostKVPool:
    if page_bytes < 2 * _PAGE_TOKENS or page_bytes % (2 * _PAGE_TOKENS):
        raise ValueError(f"--page-bytes must be a positive multiple of {2 * _PAGE_TOKENS}, got {page_bytes}")
    head_dim = page_bytes // (2 * _PAGE_TOKENS)
    return HostKVPool(
        num_pages=pages, page_size=_PAGE_TOKENS, layer_num=1, head_dim=head_dim, dtype="uint8", pin_memory=False
    )


def _batches(count: int, batch: int) -> list[range]:
    return [range(start, min(start + batch, count)) for start in range(0, count, batch)]


def _indices(pool: HostKVPool, pages: range) -> torch.Tensor:
    return torch.arange(pages.start * pool.page_size, pages.stop * pool.page_size, dtype=torch.int64)


# One side's call: (op, keys, pool pages those keys' buffers are) -> pages that succeeded.
_Call = Callable[[str, list[str], range], int]


def _sdk_call(backend: HiCacheStorage, pool: HostKVPool) -> _Call:
    def call(op: str, keys: list[str], pages: range) -> int:
        if op == "exists":
            return backend.batch_exists(keys)
        method = backend.batch_set_v1 if op == "set" else backend.batch_get_v1
        return sum(method(keys, _indices(pool, pages)))

    return call


def _raw_call(client: RawClient, buffers: list[memoryview]) -> _Call:
    def call(op: str, keys: list[str], pages: range) -> int:
        bufs = buffers[pages.start : pages.stop]
        out = client.exists(keys) if op == "exists" else getattr(client, op)(keys, bufs)
        return len(keys) if out is None else _count_ok(out, len(keys))

    return call


def _warm_up(calls: list[_Call], keys: list[str]) -> None:
    """One untimed set, exists and get per side on ``keys`` (pages ``0..len(keys)``)."""
    for call in calls:
        for op in OPS:
            call(op, keys, range(len(keys)))


def _paired_run(
    sdk: _Call,
    raw: _Call | None,
    keys: list[str],
    batch: int,
    page_bytes: int,
    *,
    before: Callable[[str], None] = lambda op: None,
) -> tuple[dict[str, OpResult], dict[str, OpResult] | None]:
    """Time every batch of every operation on both sides, back to back, alternating which goes first.

    ``before(op)`` runs, untimed, before the first batch of each operation.
    """

    def results() -> dict[str, OpResult]:
        return {op: OpResult(op, len(keys), page_bytes * len(keys) if op != "exists" else 0) for op in OPS}

    sides = [(sdk, results())]
    if raw is not None:
        sides.append((raw, results()))
    turn = 0
    for op in OPS:
        before(op)
        for pages in _batches(len(keys), batch):
            chunk = keys[pages.start : pages.stop]
            for call, result in sides if turn % 2 == 0 else sides[::-1]:
                begin = time.perf_counter()
                ok = call(op, chunk, pages)
                result[op].latencies.append(time.perf_counter() - begin)
                result[op].ok += ok
            turn += 1
    return sides[0][1], sides[1][1] if len(sides) > 1 else None


def _ratios(sdk: dict[str, OpResult], raw: dict[str, OpResult]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per operation: the median over batch pairs of raw / SDK seconds, and total raw / total SDK seconds."""
    median: dict[str, Any] = {}
    totals: dict[str, Any] = {}
    for op in OPS:
        pairs = [r / s for r, s in zip(raw[op].latencies, sdk[op].latencies, strict=True) if s > 0]
        median[op] = statistics.median(pairs) if pairs else None
        totals[op] = raw[op].seconds / sdk[op].seconds if sdk[op].seconds else None
    return median, totals


def _count_ok(out: object, default: int) -> int:
    if isinstance(out, bool):
        return default if out else 0
    if isinstance(out, int):
        return out
    if isinstance(out, (list, tuple)):
        return sum(1 for item in out if item)
    return default


def raw_client_for(cls: type[Backend[Any]], config: HiCacheStorageConfig) -> RawClient | None:
    """The backend's raw client (:func:`~hicache_storage.plugin.raw_baseline_for`), or ``None``."""
    return raw_baseline_for(cls, config)


def run_bench(
    backend: str, options: dict[str, Any] | None = None, *, page_bytes: int = 65536, pages: int = 1024, batch: int = 128
) -> dict[str, Any]:
    """Benchmark ``backend``; returns ``{"sdk": {op: summary}, "raw": {...} | None, "ratio_ours_over_raw": ...}``.

    Leaves the store as it found it: its pages and the raw baseline's are removed, and a store
    directory the run had to create is removed again once empty. A backend that cannot clear is
    refused (:class:`~hicache_storage.UnsupportedOperation`) before anything is written.
    """
    if pages < 1 or batch < 1:
        raise ValueError(f"--pages and --batch must be positive, got {pages} and {batch}")
    pool = _pool(page_bytes, pages)
    content = np.random.default_rng(0).integers(0, 256, size=pool.kv_buffer.numel(), dtype=np.uint8)
    pool.kv_buffer.view(-1).numpy()[:] = content
    keys = [hashlib.sha256(f"bench-{i}".encode()).hexdigest() for i in range(pages)]
    warm_keys = [hashlib.sha256(f"bench-warm-up-{i}".encode()).hexdigest() for i in range(min(batch, pages))]
    checked = check_store("bench", backend, options, ("supports_clear",), must_exist=False)
    created = _missing_directories(checked.store_directory())
    try:
        return _run(backend, options, pool=pool, content=content, keys=keys, warm_keys=warm_keys, batch=batch)
    finally:
        for directory in created:  # what the backend had to create for the run, if it is empty again
            with contextlib.suppress(OSError):
                directory.rmdir()


def _missing_directories(directory: Path | None) -> list[Path]:
    """``directory`` and its parents that do not exist yet, deepest first."""
    missing: list[Path] = []
    while directory is not None and not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def _run(
    backend: str,
    options: dict[str, Any] | None,
    *,
    pool: HostKVPool,
    content: np.ndarray[Any, Any],
    keys: list[str],
    warm_keys: list[str],
    batch: int,
) -> dict[str, Any]:
    pages = len(keys)
    instance = load_backend(backend, make_config("bench", extra_config=dict(options or {})))
    cls, _info = resolve_backend(backend)
    sim_model = hasattr(instance.backend, "last_call_seconds")  # the sim backend's cost model
    client: RawClient | None = None
    try:
        instance.register_mem_pool_host(pool)
        if instance.capabilities.supports_clear:
            instance.clear()
        client = raw_client_for(cls, make_config("bench", extra_config=dict(options or {})))
        sdk_call = _sdk_call(instance, pool)
        raw_call = None
        if client is not None:  # raw buffers: copies of the pool's pages
            buffers = [pool.get_data_page(i * pool.page_size).view(torch.uint8).numpy().data for i in range(pages)]
            raw_call = _raw_call(client, buffers)
        before = instance.stats.get("modelled_seconds")
        _warm_up([sdk_call] if raw_call is None else [sdk_call, raw_call], warm_keys)
        warm_up_modelled = instance.stats.get("modelled_seconds") - before
        host = pool.kv_buffer.view(-1).numpy()

        def wipe_before_gets(op: str) -> None:  # so the check below sees what the gets brought back
            if op == "get":
                host.fill(0)

        sdk, raw = _paired_run(sdk_call, raw_call, keys, batch, pool.bytes_per_page, before=wipe_before_gets)
        modelled = instance.stats.get("modelled_seconds") - warm_up_modelled if sim_model else None
        exact = bool(np.array_equal(host, content))
    finally:
        try:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        finally:
            try:
                if instance.capabilities.supports_clear:  # leave the store as found: no bench pages
                    instance.clear()
            finally:
                instance.close()
    ratio, totals = _ratios(sdk, raw) if raw is not None else (None, None)
    return {
        "backend": backend,
        "page_bytes": pool.bytes_per_page,
        "pages": pages,
        "batch": batch,
        "byte_exact": exact,
        "modelled_seconds": modelled,
        "sdk": {op: r.summary() for op, r in sdk.items()},
        "raw": {op: r.summary() for op, r in raw.items()} if raw is not None else None,
        "ratio_ours_over_raw": ratio,
        "ratio_of_totals": totals,
        "warm_up_pages": len(warm_keys),
    }


def _table(result: dict[str, Any]) -> Table:
    raw = result["raw"]
    table = Table(
        title=f"bench {result['backend']}: {result['pages']} pages of {result['page_bytes']:,} B, "
        f"batches of {result['batch']}" + ("" if raw else " (no raw baseline)"),
        caption="ratio: ours/raw throughput, median over paired batches, after a warm-up" if raw else None,
    )
    for column in ("op", "calls", "GB/s", "pages/s", "p50 ms", "p90 ms", "p99 ms", "raw GB/s", "ratio"):
        table.add_column(column, justify="right")
    for op in OPS:
        row = result["sdk"][op]
        raw_row = raw[op] if raw else None
        ratio = result["ratio_ours_over_raw"][op] if raw else None
        table.add_row(
            op,
            str(row["calls"]),
            f"{row['gb_per_s']:.3f}" if op != "exists" else "-",
            f"{row['pages_per_s']:,.0f}",
            f"{row['p50_ms']:.3f}",
            f"{row['p90_ms']:.3f}",
            f"{row['p99_ms']:.3f}",
            (f"{raw_row['gb_per_s']:.3f}" if op != "exists" else "-") if raw_row else "",
            f"{ratio:.2f}x" if ratio is not None else "",
        )
    return table


def main(args: argparse.Namespace, console: Console) -> int:
    """Run the ``bench`` sub-command; returns the exit status (1 if the data read back differs)."""
    from .arguments import parse_json_option

    result = run_bench(
        args.backend, parse_json_option(args.config), page_bytes=args.page_bytes, pages=args.pages, batch=args.batch
    )
    console.print(_table(result))
    if result["raw"] is None:
        console.print("no raw baseline: the backend names no raw_baseline_class", highlight=False)
    if result["modelled_seconds"] is not None:
        console.print(f"modelled storage time (sim cost model): {result['modelled_seconds']:.4f} s", highlight=False)
    if not result["byte_exact"]:
        console.print("[red]data read back differs from what was written[/]")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 0 if result["byte_exact"] else 1
