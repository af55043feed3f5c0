"""Benchmark: our backends against SGLang's own, built by SGLang 0.5.23's factory, called as its controller calls them.

Every side is built by SGLang's ``StorageBackendFactory.create_backend``, attached and called by
SGLang's own cache-controller methods (compiled from the installed wheel's source by
``tests/integrations/sglang_controllers.py``): a write is the controller's ``page_set_func`` of one
batch, a read its ``page_get_func``. All sides share one host pool (MHA ``page_first`` bf16,
512 KiB pages of seeded random bytes) in one process:

- group ``file``: SGLang's ``HiCacheFile`` (factory name ``file``; SGLang drives it through the
  generic calls: ``get_data_page`` + ``batch_set``, ``batch_get`` + ``set_from_flat_data_page``)
  against our ``file`` and ``slab`` backends, loaded by the factory's ``dynamic`` loader, each twice:
  with ``interface_v1`` (SGLang then calls the zero-copy ``batch_set_v1`` / ``batch_get_v1``) and
  without it (the generic calls, as for HiCacheFile);
- group ``mooncake``: SGLang's ``MooncakeStore`` (factory name ``mooncake``, zero-copy calls)
  against our ``mooncake`` backend both ways, every client on the test services'
  ``mooncake_master`` (TCP, loopback) with no segment of its own (the segment holder keeps the
  objects). ``MooncakeStore``'s module imports four of SGLang's modules only for class names
  (host pool and metrics types) whose own imports need ``transformers`` and ``torchvision``; where
  those do not import, empty stand-ins take their place (listed in the JSON, with the error) and
  ``MooncakeStore``'s own code runs unchanged. Our host pool gets the one method it lacks and
  ``MooncakeStore`` calls (``get_ksize_per_token``).

Each repetition writes one batch of fresh keys per side (HiCacheFile and MooncakeStore skip keys
that exist), reads it back into other host pages, checks every byte (untimed) and removes what it
wrote (untimed); the order of the sides rotates from one repetition to the next. Reported per side:
median seconds per batch with min-max; per comparison: the median over repetitions of their time /
our time in the same repetition (>= 1.0: ours is as fast), with min-max.

File group: files go to the page cache (no side syncs its writes), and before each side's timed
pass ``os.sync()`` (untimed) writes back every dirty page, so no side's write pays for the
writeback of pages written before it. The stores are stores in use: before the first repetition
each directory-backed side (HiCacheFile, our ``file`` both ways) is given ``--resident-pages``
pages of its own (default 8 batches; untimed, kept to the end), so its directories exist as they
do once a store holds pages (``--resident-pages 0``: every repetition writes into an empty store).
The results JSON records the load average before every repetition besides versions and machine.

    bash scripts/sglang-install.sh    # once: sglang==0.5.23 into .venv/sglang-0.5.23 (no GPU needed)
    source scripts/services/env.sh && bash scripts/services/start.sh mooncake
    PYTHONPATH=.venv/sglang-0.5.23 .venv/bin/python benchmarks/bench_vs_sglang.py --repeat 7 [--json out.json]
    PYTHONPATH=.venv/sglang-0.5.23 .venv/bin/python benchmarks/bench_vs_sglang.py --groups file [--resident-pages 0]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO / "tests" / "integrations")]
os.environ.setdefault("MC_LOG_LEVEL", "WARNING")

import torch  # noqa: E402
from disk_pages import PAGE_SIZE, make_pool  # noqa: E402
from machine import describe, load_average  # noqa: E402
from sglang_modules import load_sglang_storage  # noqa: E402

from hicache_storage import HostKVPool  # noqa: E402

#: (our side, SGLang's side, group) for every comparison reported.
COMPARISONS = (
    ("file zero-copy", "HiCacheFile", "file"),
    ("file generic", "HiCacheFile", "file"),
    ("slab zero-copy", "HiCacheFile", "file"),
    ("slab generic", "HiCacheFile", "file"),
    ("mooncake zero-copy", "MooncakeStore", "mooncake"),
    ("mooncake generic", "MooncakeStore", "mooncake"),
)
#: The objects ``MooncakeStore.warmup`` writes at start-up (``sglang_mooncake_store_warmup_key`` + a uuid).
WARMUP_KEYS = "^sglang_mooncake_store_warmup_key[0-9a-f]{32}$"
#: Modules SGLang's ``mooncake_store`` imports for class names only, and the names it takes.
MOONCAKE_TYPE_IMPORTS = {
    "sglang.srt.mem_cache.pool_host": ("HostKVCache", "HostTensorAllocator"),
    "sglang.srt.mem_cache.pool_host.mla": ("MLATokenToKVPoolHost",),
    "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler": ("DevicePoolEntry",),
    "sglang.srt.observability.metrics_collector": ("StorageMetrics",),
}


@dataclass
class Side:
    """One backend as SGLang's controller drives it, and how to undo what a repetition wrote."""

    name: str
    group: str
    controller: Any
    backend: Any
    remove: Callable[[list[str]], None]
    write_s: list[float] = field(default_factory=list)
    read_s: list[float] = field(default_factory=list)
    #: Pages written before the first repetition and kept (a store in use); file group only.
    resident: bool = False


def stand_in_type_imports() -> dict[str, str]:
    """Empty stand-ins for MooncakeStore's type-only imports that fail here; module -> the import error."""
    replaced: dict[str, str] = {}
    for module, names in MOONCAKE_TYPE_IMPORTS.items():
        package = module.rsplit(".", 1)[0]
        try:
            if package in replaced:  # below a stand-in: it cannot import for the package's reason
                raise ImportError(f"its package does not import ({replaced[package]})")
            importlib.import_module(module)
        except Exception as exc:
            stand_in = types.ModuleType(module)
            for name in names:
                setattr(stand_in, name, type(name, (), {"__module__": module}))
            sys.modules[module] = stand_in
            replaced[module] = f"{type(exc).__name__}: {exc}"
    return replaced


def engine_config(extra: dict[str, Any]) -> Any:
    """SGLang's ``HiCacheStorageConfig`` of a single-rank MHA page-first engine with ``extra``."""
    from engine_configs import engine_fields
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    return HiCacheStorageConfig(**engine_fields(extra))


def attach(
    controllers: Any, name: str, backend_type: str, extra: dict[str, Any], pool: HostKVPool, *, group: str
) -> Side:
    """Build ``backend_type`` with SGLang's factory and attach it as SGLang's (KV-only) controller does."""
    from sglang.srt.mem_cache.hicache_storage import PoolName
    from sglang.srt.mem_cache.storage import StorageBackendFactory
    from sglang_controllers import make_controller

    config = engine_config(extra)
    backend = StorageBackendFactory.create_backend(backend_type, config, pool)
    controller = make_controller(controllers, backend, backend_type, {PoolName.KV: pool}, config, hybrid=False)
    return Side(name, group, controller, backend, lambda keys: None)


def file_sides(controllers: Any, pool: HostKVPool, workdir: str, batch: int) -> list[Side]:
    """HiCacheFile, and our file and slab backends zero-copy and generic, each in a directory of its own."""
    from hicache_storage.integrations.sglang import extra_config_for

    def directory(name: str) -> str:
        path = os.path.join(workdir, name)
        os.makedirs(path, exist_ok=True)
        return path

    sides = [
        attach(controllers, "HiCacheFile", "file", {"file_storage_path": directory("hicache")}, pool, group="file")
    ]
    sides[0].remove = lambda keys, backend=sides[0].backend: _remove_hicache_files(backend, keys)
    sides[0].resident = True
    # A slab is set-associative: with room for 16 batches, no key of a batch evicts another of it.
    slab_bytes = max(1 << 30, 16 * batch * (pool.bytes_per_page + 4096))
    for backend_name, options in (("file", {}), ("slab", {"capacity_bytes": slab_bytes})):
        for path_name, interface_v1 in (("zero-copy", 1), ("generic", 0)):
            name = f"{backend_name} {path_name}"
            extra = extra_config_for(
                backend_name, path=directory(name.replace(" ", "-")), interface_v1=interface_v1, **options
            )
            side = attach(controllers, name, "dynamic", extra, pool, group="file")
            side.remove = lambda keys, sdk=side.backend.backend: _delete(sdk, keys)
            side.resident = backend_name == "file"  # a slab's preallocated files have no directories to fill
            sides.append(side)
    return sides


def mooncake_sides(controllers: Any, pool: HostKVPool) -> tuple[list[Side], dict[str, str]]:
    """MooncakeStore and our mooncake backend (zero-copy and generic) on the test master; the stand-ins used."""
    from hicache_storage.integrations.sglang import extra_config_for

    master = os.environ.get("HICACHE_TEST_MOONCAKE_MASTER")
    metadata = os.environ.get("HICACHE_TEST_MOONCAKE_METADATA")
    if not master or not metadata:
        raise SystemExit(
            "group mooncake needs the test master: source scripts/services/env.sh && "
            "bash scripts/services/start.sh mooncake (or pass --groups file)"
        )
    replaced = stand_in_type_imports()
    tag = f"benchvs{secrets.token_hex(4)}"
    theirs = {
        "master_server_address": master,
        "metadata_server": metadata,
        "global_segment_size": 0,
        "protocol": "tcp",
        "device_name": "",
        "extra_backend_tag": tag,
    }
    pool.get_ksize_per_token = lambda: pool.size_per_token // 2  # type: ignore[attr-defined]  # K half of MHA
    store_side = attach(controllers, "MooncakeStore", "mooncake", theirs, pool, group="mooncake")
    store = store_side.backend.store
    store.remove_by_regex(WARMUP_KEYS, True)  # the 4 KB object each MooncakeStore writes at start-up and leaves
    store_side.remove = lambda keys: store.remove_by_regex(f"^{tag}_", True)  # force: reads leave leases
    sides = [store_side]
    ours = {"master_server_address": master, "metadata_server": metadata, "global_segment_size": 0}
    for path_name, interface_v1 in (("zero-copy", 1), ("generic", 0)):
        extra = extra_config_for("mooncake", key_prefix=f"{tag}-{path_name}/", interface_v1=interface_v1, **ours)
        side = attach(controllers, f"mooncake {path_name}", "dynamic", extra, pool, group="mooncake")
        side.remove = lambda keys, sdk=side.backend.backend: _delete(sdk, keys)
        sides.append(side)
    return sides, replaced


def _remove_hicache_files(backend: Any, keys: list[str]) -> None:
    """Unlink HiCacheFile's page files of ``keys`` (its ``clear`` would remove the resident pages too)."""
    for key in keys:
        os.remove(os.path.join(backend.file_path, f"{backend._get_suffixed_key(key)}.bin"))


def _delete(sdk: Any, keys: list[str]) -> None:
    if not all(sdk.delete(keys)):
        raise RuntimeError(f"{type(sdk).__name__} could not delete what a repetition wrote")


def add_resident_pages(sides: list[Side], pool: HostKVPool, batch: int, pages: int) -> None:
    """Write ``pages`` pages of fresh keys to each side marked resident, in batches as a repetition does."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

    source = torch.arange(0, batch * PAGE_SIZE, dtype=torch.int64)
    for side in sides:
        if not side.resident:
            continue
        for begin in range(0, pages, batch):
            count = min(batch, pages - begin)
            keys = [secrets.token_hex(32) for _ in range(count)]
            info = HiCacheStorageExtraInfo(prefix_keys=None)
            if not side.controller.page_set_func(keys, source[: count * PAGE_SIZE], info):
                raise SystemExit(f"{side.name}: could not write its resident pages")


def run_side(side: Side, pool: HostKVPool, batch: int) -> None:
    """One repetition: write a batch of fresh keys, read it into other pages, check, remove (all but I/O untimed)."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageExtraInfo

    keys = [secrets.token_hex(32) for _ in range(batch)]
    if side.group == "file":
        os.sync()  # no side pays for the writeback of pages another wrote before it
    source = torch.arange(0, batch * PAGE_SIZE, dtype=torch.int64)
    target = torch.arange(batch * PAGE_SIZE, 2 * batch * PAGE_SIZE, dtype=torch.int64)
    pool.kv_buffer[:, batch * PAGE_SIZE :].zero_()  # page_first: (K/V, tokens, layers, heads, dims)
    operation = SimpleNamespace(request_id=f"bench-{side.name}", is_terminated=lambda: False)
    controller = side.controller
    try:
        begin = time.perf_counter()
        stored = controller.page_set_func(keys, source, HiCacheStorageExtraInfo(prefix_keys=None))
        written = time.perf_counter()
        read = controller.page_get_func(operation, keys, target, HiCacheStorageExtraInfo(prefix_keys=None))
        done = time.perf_counter()
        if not stored or read != batch:
            raise SystemExit(f"{side.name}: wrote {stored}, read {read} of {batch} pages")
        sent = pool.kv_buffer[:, : batch * PAGE_SIZE].view(torch.int16)  # bit patterns: NaNs compare equal
        got = pool.kv_buffer[:, batch * PAGE_SIZE : 2 * batch * PAGE_SIZE].view(torch.int16)
        if not torch.equal(sent, got):
            raise SystemExit(f"{side.name}: pages came back with other bytes")
    finally:
        side.remove(keys)  # a failed repetition's pages too
    side.write_s.append(written - begin)
    side.read_s.append(done - written)


def summary(values: list[float]) -> dict[str, float]:
    """Median, min and max (rounded)."""
    return {"median": round(statistics.median(values), 6), "min": round(min(values), 6), "max": round(max(values), 6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="file,mooncake", help="comma list of: file, mooncake")
    parser.add_argument("--batch", type=int, default=128, help="pages per call (SGLang sends at most 128)")
    parser.add_argument("--repeat", type=int, default=7, help="timed repetitions (after one untimed)")
    parser.add_argument("--dir", default=None, help="parent directory of the file group's data (default: temp)")
    parser.add_argument(
        "--resident-pages",
        type=int,
        default=None,
        help="pages each directory-backed file side holds before timing (default: 8 batches; 0: empty stores)",
    )
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    groups = [g for g in args.groups.split(",") if g]
    unknown = set(groups) - {"file", "mooncake"}
    if unknown:
        raise SystemExit(f"unknown groups {sorted(unknown)}; expected file, mooncake")
    if args.resident_pages is None:
        args.resident_pages = 8 * args.batch
    if args.resident_pages < 0:
        raise SystemExit(f"--resident-pages must be >= 0, got {args.resident_pages}")
    reason = load_sglang_storage()
    if reason is not None:
        raise SystemExit(reason)
    from sglang_controllers import load_controllers

    controllers = load_controllers()
    machine_before = describe()
    pool = make_pool(2 * args.batch)
    workdir = tempfile.mkdtemp(prefix="hicache-vs-sglang-", dir=args.dir)
    sides: list[Side] = []
    replaced: dict[str, str] = {}
    try:
        if "file" in groups:
            sides += file_sides(controllers, pool, workdir, args.batch)
            add_resident_pages(sides, pool, args.batch, args.resident_pages)
        if "mooncake" in groups:
            found, replaced = mooncake_sides(controllers, pool)
            sides += found
        loads: list[list[float]] = []
        for repetition in range(args.repeat + 1):  # repetition 0 warms up
            loads.append(load_average())
            for group in groups:
                members = [side for side in sides if side.group == group]
                shift = repetition % len(members)
                for side in members[shift:] + members[:shift]:
                    run_side(side, pool, args.batch)
            if repetition == 0:
                for side in sides:
                    side.write_s.clear()
                    side.read_s.clear()
        results = report(sides, groups, pool, args)
        results["load_average_per_repetition"] = loads
    finally:
        for side in sides:
            close = getattr(side.backend, "close", None)
            if callable(close):
                close()
        shutil.rmtree(workdir, ignore_errors=True)
    results["machine"] = {**machine_before, "load_average_after": describe()["load_average"]}
    results["mooncake_store_stand_ins"] = replaced
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


def report(sides: list[Side], groups: list[str], pool: HostKVPool, args: argparse.Namespace) -> dict[str, Any]:
    """Print and return the per-side figures and the comparisons of the groups run."""
    mib = args.batch * pool.bytes_per_page / (1 << 20)
    by_name = {side.name: side for side in sides}
    out: dict[str, Any] = {"page_bytes": pool.bytes_per_page, "batch": args.batch, "repeat": args.repeat, "sides": {}}
    if "file" in groups:
        out["file_group"] = {
            "sync_before_each_pass": True,
            "resident_pages": args.resident_pages,
            "resident_sides": [side.name for side in sides if side.resident],
            "samples_ms": {  # per repetition, in order: the spread behind each median
                side.name: {op: [round(t * 1e3, 2) for t in getattr(side, f"{op}_s")] for op in ("write", "read")}
                for side in sides
                if side.group == "file"
            },
        }
    for side in sides:
        row = {"write_s": summary(side.write_s), "read_s": summary(side.read_s)}
        row["write_mib_s"] = round(mib / row["write_s"]["median"], 1)
        row["read_mib_s"] = round(mib / row["read_s"]["median"], 1)
        out["sides"][side.name] = row
        print(
            f"{side.name:20s} write {row['write_s']['median'] * 1e3:8.1f} ms "
            f"[{row['write_s']['min'] * 1e3:.1f}-{row['write_s']['max'] * 1e3:.1f}] {row['write_mib_s']:7.1f} MiB/s | "
            f"read {row['read_s']['median'] * 1e3:8.1f} ms "
            f"[{row['read_s']['min'] * 1e3:.1f}-{row['read_s']['max'] * 1e3:.1f}] {row['read_mib_s']:7.1f} MiB/s"
        )
    out["ratios"] = {}
    for ours, theirs, group in COMPARISONS:
        if group not in groups:
            continue
        row = {}
        for op in ("write", "read"):
            mine, base = getattr(by_name[ours], f"{op}_s"), getattr(by_name[theirs], f"{op}_s")
            row[op] = summary([b / m for b, m in zip(base, mine, strict=True)])
        out["ratios"][f"{ours} / {theirs}"] = row
        print(
            f"{ours:20s} vs {theirs:13s}: write {row['write']['median']:.2f}x "
            f"[{row['write']['min']:.2f}-{row['write']['max']:.2f}], "
            f"read {row['read']['median']:.2f}x [{row['read']['min']:.2f}-{row['read']['max']:.2f}]"
        )
    return out


if __name__ == "__main__":
    main()
