"""Multi-threaded load test of the storage backends: mixed set/get/exists, every hit verified.

    python benchmarks/load_test.py --backends file,sim,redis --duration 10 --threads 8
    python benchmarks/load_test.py --json results/load.json        # every backend that is reachable

Servers come from the HICACHE_TEST_* settings of scripts/services/env.sh (start them with
scripts/services/start.sh), all on 127.0.0.1. Each thread runs a mix of ``batch_set_v1``,
``batch_get_v1`` and ``batch_exists`` over a shared key universe, moving pages through a shared
host pool (alloc/free per call, as the engine does). Page content derives from the key, so every
hit is compared byte for byte. Reported per backend: operations per second, p50/p99 latency of a
batch call, exceptions reaching the caller (must be 0), failed writes, hits, wrong pages (must be 0),
host pages left allocated (must be 0) and process RSS growth from after the warm-up to the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, load_backend, make_config

REPO = Path(__file__).resolve().parents[1]
ALL_BACKENDS = ("file", "sim", "fsspec", "redis", "redis-cluster", "s3", "mooncake")
PAGE_SIZE = 4


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def service_settings() -> dict[str, str]:
    done = subprocess.run(
        ["bash", str(REPO / "scripts/services/env.sh"), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return json.loads(done.stdout) if done.returncode == 0 else {}


def backend_options(name: str, env: dict[str, str], scratch: Path) -> tuple[str, dict[str, Any]]:
    """(entry point name, extra_config) for one backend of the load test."""
    prefix = f"load{secrets.token_hex(3)}"
    if name == "file":
        return "file", {"path": str(scratch / "file")}
    if name == "sim":
        return "sim", {}
    if name == "fsspec":
        return "fsspec", {"url": f"file://{scratch / 'fsspec'}"}
    if name == "redis":
        return "redis", {"url": env["HICACHE_TEST_REDIS_URL"], "key_prefix": f"{prefix}:"}
    if name == "redis-cluster":
        nodes = env["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")
        return "redis", {"cluster": True, "nodes": nodes, "key_prefix": f"{prefix}:"}
    if name == "s3":
        import boto3

        bucket = f"load-{secrets.token_hex(4)}"
        creds = {
            "aws_access_key_id": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
        }
        client = boto3.client(
            "s3", endpoint_url=env["HICACHE_TEST_S3_ENDPOINT"], region_name=env["HICACHE_TEST_S3_REGION"], **creds
        )
        client.create_bucket(Bucket=bucket)
        client.close()
        return "s3", {
            "bucket": bucket,
            "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
            "region": env["HICACHE_TEST_S3_REGION"],
            "prefix": prefix,
            **creds,
        }
    if name == "mooncake":
        return "mooncake", {
            "master_server_address": env["HICACHE_TEST_MOONCAKE_MASTER"],
            "metadata_server": env["HICACHE_TEST_MOONCAKE_METADATA"],
            "global_segment_size": 0,
            "local_buffer_size": 64 << 20,
            "key_prefix": f"{prefix}/",
        }
    raise SystemExit(f"unknown backend {name!r}; choose from {', '.join(ALL_BACKENDS)}")


class Run:
    """Shared state of one backend's load run."""

    def __init__(self, backend: HiCacheStorage, pool: HostKVPool, universe: int, batch: int) -> None:
        self.backend = backend
        self.pool = pool
        self.batch = batch
        salt = secrets.token_hex(6)
        self.keys = [hashlib.sha256(f"{salt}:{i}".encode()).hexdigest() for i in range(universe)]
        nbytes = pool.bytes_per_page
        self.content = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "little")).bytes(nbytes)
            for k in self.keys
        ]
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.counts = {"set": 0, "get": 0, "exists": 0}
        self.errors: list[str] = []
        self.failed_sets = 0
        self.hits = 0
        self.wrong_pages = 0

    def _fill(self, start: int, data: bytes) -> None:
        offset = 0
        for segment in self.pool.page_segments(start):
            view = segment.cast("B")
            view[:] = data[offset : offset + view.nbytes]
            offset += view.nbytes

    def _page(self, start: int) -> bytes:
        return b"".join(bytes(s) for s in self.pool.page_segments(start))

    def one(self, rng: random.Random) -> None:
        first = rng.randrange(0, len(self.keys) - self.batch)
        keys = self.keys[first : first + self.batch]
        pick = rng.random()
        op = "set" if pick < 0.4 else "get" if pick < 0.8 else "exists"
        indices = self.pool.alloc(len(keys) * PAGE_SIZE, owner=threading.get_ident())
        if indices is None:
            with self.lock:
                self.errors.append("host pool exhausted")
            return
        starts = [int(s) for s in indices[::PAGE_SIZE].tolist()]
        try:
            if op == "set":
                for offset, start in enumerate(starts):
                    self._fill(start, self.content[first + offset])
            else:
                for start in starts:
                    self._fill(start, b"\xee" * self.pool.bytes_per_page)
            begin = time.perf_counter()
            try:
                if op == "set":
                    result: Any = self.backend.batch_set_v1(keys, indices)
                elif op == "get":
                    result = self.backend.batch_get_v1(keys, indices)
                else:
                    result = self.backend.batch_exists(keys)
            except Exception as error:
                with self.lock:
                    self.errors.append(f"{op}: {type(error).__name__}: {error}")
                return
            elapsed = time.perf_counter() - begin
            failed = hits = wrong = 0
            if op == "set":
                failed = sum(1 for r in result if r is not True)
            elif op == "get":
                for offset, (start, hit) in enumerate(zip(starts, result, strict=True)):
                    if hit is True:
                        hits += 1
                        wrong += self._page(start) != self.content[first + offset]
            with self.lock:
                self.latencies.append(elapsed)
                self.counts[op] += 1
                self.failed_sets += failed
                self.hits += hits
                self.wrong_pages += wrong
        finally:
            self.pool.free(indices)


def run_backend(name: str, args: argparse.Namespace, env: dict[str, str], scratch: Path) -> dict[str, Any]:
    entry, extra = backend_options(name, env, scratch)
    pool = HostKVPool(
        num_pages=args.threads * args.batch * 2, page_size=PAGE_SIZE, layer_num=args.layers, head_num=2, head_dim=64
    )
    backend = load_backend(entry, make_config("load-test", extra_config=extra))
    backend.register_mem_pool_host(pool)
    run = Run(backend, pool, args.universe, args.batch)
    stop = threading.Event()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            run.one(rng)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(args.threads)]
    for thread in threads:
        thread.start()
    warmup = min(1.0, args.duration * 0.2)
    time.sleep(warmup)
    with run.lock:
        run.latencies.clear()
        base_counts = dict(run.counts)
    rss_before = rss_bytes()
    begin = time.monotonic()
    time.sleep(args.duration)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    elapsed = time.monotonic() - begin
    rss_after = rss_bytes()
    stats = backend.get_stats()
    hung = sum(thread.is_alive() for thread in threads)
    try:
        if backend.capabilities.supports_clear:
            backend.clear()
    finally:
        backend.close()
    ops = sum(run.counts.values()) - sum(base_counts.values())
    lat = sorted(run.latencies)

    def quantile(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return {
        "backend": name,
        "threads": args.threads,
        "batch_pages": args.batch,
        "page_bytes": pool.bytes_per_page,
        "seconds": round(elapsed, 2),
        "ops": ops,
        "ops_per_s": round(ops / elapsed, 1),
        "pages_per_s": round(ops * args.batch / elapsed, 1),
        "p50_ms": round(quantile(0.50), 3),
        "p99_ms": round(quantile(0.99), 3),
        "errors": len(run.errors),
        "error_samples": run.errors[:3],
        "failed_sets": run.failed_sets,
        "faults": stats.get("faults", 0),
        "hits": run.hits,
        "wrong_pages": run.wrong_pages,
        "leaked_host_pages": pool.used_pages,
        "hung_threads": hung,
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_growth_mb": round((rss_after - rss_before) / 2**20, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(ALL_BACKENDS), help="comma-separated list")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per backend (1..60)")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8, help="pages per call")
    parser.add_argument("--layers", type=int, default=4, help="layers per page (page = layers x 2 KiB)")
    parser.add_argument("--universe", type=int, default=2048, help="distinct keys")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--skip-unavailable", action="store_true", help="skip backends that fail to start")
    args = parser.parse_args(argv)
    if not 0.5 <= args.duration <= 60:
        parser.error("--duration must be in [0.5, 60] seconds")
    if not 1 <= args.threads <= 64:
        parser.error("--threads must be in [1, 64]")
    env = service_settings()
    results = []
    failed = False
    scratch = Path(tempfile.mkdtemp(prefix="hc-load-"))
    try:
        for name in [n.strip() for n in args.backends.split(",") if n.strip()]:
            try:
                result = run_backend(name, args, env, scratch)
            except Exception as error:
                if not args.skip_unavailable:
                    raise
                print(f"{name}: skipped ({type(error).__name__}: {error})", file=sys.stderr)
                continue
            results.append(result)
            bad = result["errors"] or result["wrong_pages"] or result["leaked_host_pages"] or result["hung_threads"]
            failed = failed or bool(bad)
            print(
                f"{name:14s} {result['ops_per_s']:>9.1f} ops/s  p50 {result['p50_ms']:>7.3f} ms  "
                f"p99 {result['p99_ms']:>8.3f} ms  errors {result['errors']}  failed_sets {result['failed_sets']}  "
                f"hits {result['hits']}  wrong {result['wrong_pages']}  leaked {result['leaked_host_pages']}  "
                f"rss +{result['rss_growth_mb']} MB",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": results, "machine": describe()}, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
