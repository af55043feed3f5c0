"""Network backends against their raw clients, side by side on the same server, same pages.

For each backend section and batch size, each repetition runs our ``batch_set_v1`` and the raw
client's writes of the same bytes back to back, then our ``batch_get_v1`` and the raw client's
reads, alternating which side goes first. Reported: median seconds per batch, GB/s, and the ratio
ours/raw of throughput (>= 1.0 means ours is as fast or faster) as the median over repetitions of
each repetition's ratio, which drifting machine load affects less than a ratio of two medians.
Every timed call follows an untimed pause (``--settle-ms``, default 20) in which the server
finishes work the previous call left (Redis frees the values a SET replaced); without it, the raw
client timed against itself read 1.10-1.41 at batch 32. ``--control`` adds, per section and
batch, a row timing the raw client against itself on keys of its own: what the method reads for
equal code on this machine, next to the figures for ours.

    source scripts/services/env.sh && bash scripts/services/start.sh redis redis-cluster s3
    .venv/bin/python benchmarks/bench_network.py [--sections redis,redis-cluster,s3,fsspec] [--reps 7] [--control]

A section is a function ``(settings, pool, args) -> Section``; add one to ``SECTIONS`` to cover
another backend.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from machine import describe

from hicache_storage import HiCacheStorage, HostKVPool, load_backend, make_config

REPO = Path(__file__).resolve().parents[1]
PAGE_TOKENS = 64


@dataclass
class Section:
    """One backend and its raw-client counterpart; ``raw_set``/``raw_get`` take (keys, values)."""

    name: str
    backend: HiCacheStorage
    raw_set: Callable[[list[str], list[bytes]], None]
    raw_get: Callable[[list[str]], list[bytes]]
    close: Callable[[], None] = field(default=lambda: None)


def settings() -> dict[str, str]:
    """HICACHE_TEST_* service settings (the environment overrides scripts/services/env.sh)."""
    script = REPO / "scripts" / "services" / "env.sh"
    out = subprocess.run(["bash", str(script), "--json"], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def make_pool(max_batch: int) -> HostKVPool:
    """A host pool of 512 KiB pages (MHA page_first: bf16, 4 layers, 8 heads x 64, 64 tokens)."""
    pool = HostKVPool(
        num_pages=2 * max_batch, page_size=PAGE_TOKENS, layer_num=4, head_num=8, head_dim=64, layout="page_first"
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(1)))
    return pool


def open_backend(name: str, extra: dict[str, Any], pool: HostKVPool) -> HiCacheStorage:
    backend = load_backend(name, make_config("bench", extra_config={**extra, "namespace": secrets.token_hex(4)}))
    backend.register_mem_pool_host(pool)
    return backend


# ------------------------------------------------------------------------------------------- sections
def redis_section(env: dict[str, str], pool: HostKVPool, cluster: bool) -> Section:
    import redis
    from redis.cluster import ClusterNode, RedisCluster

    prefix = f"bench{secrets.token_hex(3)}:"
    if cluster:
        nodes = env["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")
        extra: dict[str, Any] = {"cluster": True, "nodes": nodes, "key_prefix": prefix}
        startup = [ClusterNode(n.rsplit(":", 1)[0], int(n.rsplit(":", 1)[1])) for n in nodes]
        raw: Any = RedisCluster(startup_nodes=startup)
    else:
        extra = {"url": env["HICACHE_TEST_REDIS_URL"], "key_prefix": prefix}
        raw = redis.Redis.from_url(env["HICACHE_TEST_REDIS_URL"])
    backend = open_backend("redis", extra, pool)

    def raw_set(keys: list[str], values: list[bytes]) -> None:
        pipe = raw.pipeline(transaction=False)
        for key, value in zip(keys, values, strict=True):
            pipe.set(f"raw{prefix}{key}", value)
        pipe.execute()

    def raw_get(keys: list[str]) -> list[bytes]:
        pipe = raw.pipeline(transaction=False)
        for key in keys:
            pipe.get(f"raw{prefix}{key}")
        return list(pipe.execute())

    def close() -> None:
        for key in raw.scan_iter(match=f"raw{prefix}*"):
            raw.delete(key)
        raw.close()

    return Section("redis-cluster" if cluster else "redis", backend, raw_set, raw_get, close)


def s3_section(env: dict[str, str], pool: HostKVPool, workers: int) -> Section:
    import boto3

    bucket = f"bench-{secrets.token_hex(4)}"
    creds = {
        "region_name": env["HICACHE_TEST_S3_REGION"],
        "aws_access_key_id": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
    }
    raw = boto3.client(
        "s3",
        endpoint_url=env["HICACHE_TEST_S3_ENDPOINT"],
        config=boto3.session.Config(max_pool_connections=workers),
        **creds,
    )
    raw.create_bucket(Bucket=bucket)
    extra = {
        "bucket": bucket,
        "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
        "region": creds["region_name"],
        "aws_access_key_id": creds["aws_access_key_id"],
        "aws_secret_access_key": creds["aws_secret_access_key"],
        "max_workers": workers,
    }
    backend = open_backend("s3", extra, pool)
    threads = ThreadPoolExecutor(max_workers=workers)

    def raw_set(keys: list[str], values: list[bytes]) -> None:
        list(threads.map(lambda kv: raw.put_object(Bucket=bucket, Key=f"raw/{kv[0]}", Body=kv[1]), zip(keys, values)))

    def raw_get(keys: list[str]) -> list[bytes]:
        return list(threads.map(lambda k: raw.get_object(Bucket=bucket, Key=f"raw/{k}")["Body"].read(), keys))

    return Section("s3", backend, raw_set, raw_get, threads.shutdown)


def fsspec_section(env: dict[str, str], pool: HostKVPool, concurrency: int) -> Section:
    import boto3
    import fsspec

    bucket = f"bench-fs-{secrets.token_hex(4)}"
    boto3.client(
        "s3",
        endpoint_url=env["HICACHE_TEST_S3_ENDPOINT"],
        region_name=env["HICACHE_TEST_S3_REGION"],
        aws_access_key_id=env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        aws_secret_access_key=env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
    ).create_bucket(Bucket=bucket)
    storage_options = {
        "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
        "key": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "secret": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
        "client_kwargs": {"region_name": env["HICACHE_TEST_S3_REGION"]},
    }
    backend = open_backend(
        "fsspec", {"url": f"s3://{bucket}/ours", "storage_options": storage_options, "concurrency": concurrency}, pool
    )
    raw = fsspec.filesystem("s3", skip_instance_cache=True, **storage_options)

    def raw_set(keys: list[str], values: list[bytes]) -> None:
        raw.pipe({f"{bucket}/raw/{k}": v for k, v in zip(keys, values, strict=True)}, batch_size=concurrency)

    def raw_get(keys: list[str]) -> list[bytes]:
        paths = [f"{bucket}/raw/{k}" for k in keys]
        out = raw.cat(paths, batch_size=concurrency)
        return [out[p] for p in paths]

    return Section("fsspec-s3fs", backend, raw_set, raw_get)


SECTIONS: dict[str, Callable[[dict[str, str], HostKVPool, argparse.Namespace], Section]] = {
    "redis": lambda env, pool, args: redis_section(env, pool, cluster=False),
    "redis-cluster": lambda env, pool, args: redis_section(env, pool, cluster=True),
    "s3": lambda env, pool, args: s3_section(env, pool, args.workers),
    "fsspec": lambda env, pool, args: fsspec_section(env, pool, args.workers),
}


# ------------------------------------------------------------------------------------------- measuring
@contextlib.contextmanager
def timer(samples: list[float]) -> Iterator[None]:
    begin = time.perf_counter()
    yield
    samples.append(time.perf_counter() - begin)


def measure(
    section: Section, pool: HostKVPool, batch: int, reps: int, *, settle_s: float = 0.0, control: bool = False
) -> dict[str, Any]:
    """One row: both sides' medians and ratios for ``batch`` pages (see the module docstring).

    ``settle_s``: an untimed pause before every timed call. ``control``: the "ours" side is the raw
    client again, on keys of its own, so the ratios show what the method reads for equal code.
    """
    page_bytes = int(pool.bytes_per_page)
    keys = [hashlib.sha256(f"{secrets.token_hex(4)}{i}".encode()).hexdigest() for i in range(batch)]
    twin_keys = [f"control-{key}" for key in keys]
    src = torch.arange(0, batch * PAGE_TOKENS)
    dst = torch.arange(batch * PAGE_TOKENS, 2 * batch * PAGE_TOKENS)
    values = [b"".join(pool.page_segments(i * PAGE_TOKENS)) for i in range(batch)]

    def ours_set() -> bool:
        if control:
            section.raw_set(twin_keys, values)
            return True
        return all(section.backend.batch_set_v1(keys, src))

    def ours_get() -> bool:
        if control:
            return section.raw_get(twin_keys) == values
        return all(section.backend.batch_get_v1(keys, dst))

    times: dict[str, list[float]] = {"ours_set": [], "raw_set": [], "ours_get": [], "raw_get": []}
    for rep in range(reps + 1):  # the first repetition warms connections and is discarded
        sink: dict[str, list[float]] = times if rep > 0 else {k: [] for k in times}
        ours_first = rep % 2 == 0  # alternate which side goes first, so order effects cancel
        for side in ("ours", "raw") if ours_first else ("raw", "ours"):
            time.sleep(settle_s)
            with timer(sink[side + "_set"]):
                if side == "ours":
                    ok_set = ours_set()
                else:
                    section.raw_set(keys, values)
        for side in ("ours", "raw") if ours_first else ("raw", "ours"):
            time.sleep(settle_s)
            with timer(sink[side + "_get"]):
                if side == "ours":
                    ok_get = ours_get()
                else:
                    got = section.raw_get(keys)
        if not (ok_set and ok_get) or got != values:
            raise RuntimeError(f"{section.name}: a round trip failed at batch {batch}")
    name = f"{section.name} (control)" if control else section.name
    row: dict[str, Any] = {"section": name, "batch": batch, "page_bytes": page_bytes, "settle_s": settle_s}
    for name, samples in times.items():
        row[name + "_s"] = statistics.median(samples)
        row[name + "_gbps"] = batch * page_bytes / row[name + "_s"] / 1e9
    # Each repetition's two sides ran back to back: the median of per-repetition ratios is less
    # sensitive to load drifting over the run than a ratio of two medians.
    for op in ("set", "get"):
        pairs = zip(times[f"raw_{op}"], times[f"ours_{op}"], strict=True)
        row[f"{op}_ratio"] = statistics.median(raw / ours for raw, ours in pairs)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma list of {', '.join(SECTIONS)}")
    parser.add_argument("--batches", default="32,128", help="batch sizes (pages per call)")
    parser.add_argument("--reps", type=int, default=7, help="measured repetitions (median reported)")
    parser.add_argument("--workers", type=int, default=16, help="S3 thread count / fsspec concurrency, both sides")
    parser.add_argument("--settle-ms", type=float, default=20.0, help="untimed pause before every timed call")
    parser.add_argument(
        "--control", action="store_true", help="also run each section raw against raw (what equal code reads as)"
    )
    parser.add_argument("--json", dest="json_path", help="also write the rows to this JSON file")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    env = {**settings(), **{k: v for k, v in os.environ.items() if k.startswith("HICACHE_TEST_")}}
    pool = make_pool(max(batches))
    rows = []
    columns = ("ours set", "raw set", "ratio", "ours get", "raw get", "ratio")
    header = f"{'section':<24}{'batch':>6}" + "".join(f"{c:>{7 if c == 'ratio' else 11}}" for c in columns)
    print(
        f"page {pool.bytes_per_page // 1024} KiB, median of {args.reps}, {args.settle_ms:g} ms settle; "
        "columns in GB/s, ratio = ours/raw"
    )
    print(header)
    for name in args.sections.split(","):
        section = SECTIONS[name](env, pool, args)
        try:
            for batch, control in itertools.product(batches, (False, True) if args.control else (False,)):
                row = measure(section, pool, batch, args.reps, settle_s=args.settle_ms / 1e3, control=control)
                rows.append(row)
                print(
                    f"{row['section']:<24}{batch:>6}{row['ours_set_gbps']:>11.3f}{row['raw_set_gbps']:>11.3f}"
                    f"{row['set_ratio']:>7.2f}{row['ours_get_gbps']:>11.3f}{row['raw_get_gbps']:>11.3f}"
                    f"{row['get_ratio']:>7.2f}",
                    flush=True,
                )
        finally:
            with contextlib.suppress(Exception):
                section.backend.clear()
            section.backend.close()
            section.close()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"rows": rows, "machine": describe()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
