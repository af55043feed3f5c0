"""Operator commands: ``usage``, ``purge``, ``health`` and ``metrics`` of a store.

``usage`` groups a listing by key space and names each from its manifest; ``purge`` removes whole
key spaces chosen by model, revision or namespace, or pages older than an age, and never touches
another key space; ``health`` makes one bounded round trip and sets the exit code for scripts;
``metrics`` prints (or writes for node_exporter) the Prometheus text of a probed instance.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from ..config import make_config
from ..contract import HiCacheStorage
from ..errors import ConfigError, InvalidRequestError
from ..host_pool import HostKVPool
from ..listing import KeySpaceManifest, StoredPage
from ..metrics import prometheus_text, write_textfile
from ..registry import load_backend
from ..store_admin import iter_pages, read_manifest
from .arguments import parse_json_option

__all__ = ["KeySpaceUsage", "add_commands", "parse_age", "probe", "usage_of"]

_AGE = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>[smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``1d``, ``2w``; raises :class:`ConfigError`."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ConfigError("--older-than", f"expected a number and a unit (s, m, h, d, w), e.g. 1d or 12h; got {text!r}")
    return float(match["n"]) * _UNITS[match["unit"]]


@dataclass
class KeySpaceUsage:
    """Pages and bytes of one key space, with its manifest when it has one."""

    prefix: str
    manifest: KeySpaceManifest | None = None
    pages: int = 0
    nbytes: int = 0
    oldest: float | None = None
    newest: float | None = None
    ranks: set[str] = field(default_factory=set)
    records: list[StoredPage] = field(default_factory=list)
    manifest_keys: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        """Storage keys of the pages (manifests excluded)."""
        return [page.key for page in self.records]

    def add(self, page: StoredPage) -> None:
        self.pages += 1
        self.nbytes += page.nbytes or 0
        self.records.append(page)
        if page.modified is not None:
            self.oldest = page.modified if self.oldest is None else min(self.oldest, page.modified)
            self.newest = page.modified if self.newest is None else max(self.newest, page.modified)

    def row(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "prefix": self.prefix,
            "model": m.model_name if m else None,
            "revision": m.model_revision if m else None,
            "namespace": m.namespace if m else None,
            "pool": m.pool if m else None,
            "dtype": m.dtype if m else None,
            "page_bytes": m.page_bytes if m else None,
            "ranks": sorted(self.ranks),
            "pages": self.pages,
            "bytes": self.nbytes,
            "first_write": m.first_write if m else self.oldest,
            "last_write": m.last_write if m else self.newest,
            "pinned": m.pinned if m else False,
        }


def usage_of(storage: HiCacheStorage) -> list[KeySpaceUsage]:
    """Every key space under the backend's location, pages counted, manifests read (listing order)."""
    spaces: dict[str, KeySpaceUsage] = {}
    for page in iter_pages(storage):
        prefix = page.prefix
        if prefix is None:
            continue
        space = spaces.setdefault(prefix, KeySpaceUsage(prefix))
        if page.is_manifest:
            space.manifest_keys.append(page.key)
            space.ranks.add(page.key[len(prefix) :].split(".", 1)[1])
            if space.manifest is None:
                space.manifest = read_manifest(storage, page.key)
        else:
            space.add(page)
    return list(spaces.values())


def _open(args: argparse.Namespace) -> HiCacheStorage:
    extra = parse_json_option(args.config)
    return load_backend(args.backend, make_config(args.model_name or "hicache-storage-admin", extra_config=extra))


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_usage(args: argparse.Namespace, console: Console) -> int:
    with _open(args) as storage:
        spaces = usage_of(storage)
    rows = [space.row() for space in spaces]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"{args.backend}: pages and bytes per key space")
    for column in (
        "key space",
        "model",
        "revision",
        "namespace",
        "pool",
        "dtype",
        "ranks",
        "pages",
        "bytes",
        "last write",
    ):
        table.add_column(column, justify="right" if column in ("pages", "bytes") else "left")
    for row in rows:
        table.add_row(
            row["prefix"],
            row["model"] or "?",
            row["revision"] or "",
            row["namespace"] or "",
            row["pool"] or "?",
            row["dtype"] or "?",
            ",".join(row["ranks"]) or "-",
            str(row["pages"]),
            f"{row['bytes'] / 2**20:.1f} MiB",
            _when(row["last_write"]),
        )
    console.print(table)
    console.print(
        f"{len(rows)} key spaces, {sum(r['pages'] for r in rows)} pages, {sum(r['bytes'] for r in rows)} bytes"
    )
    return 0


def _selected(args: argparse.Namespace, spaces: list[KeySpaceUsage]) -> list[tuple[KeySpaceUsage, list[str], bool]]:
    """(key space, storage keys to remove, whether the whole space goes) for the purge filters."""
    chosen: list[tuple[KeySpaceUsage, list[str], bool]] = []
    if args.older_than is not None:
        cutoff = time.time() - parse_age(args.older_than)
    for space in spaces:
        m = space.manifest
        if args.prefix is not None:
            if space.prefix == args.prefix:
                chosen.append((space, space.keys + space.manifest_keys, True))
            continue
        if args.model is not None or args.namespace is not None:
            if m is None:
                continue  # a key space without a manifest cannot be matched by model or namespace
            if args.model is not None and (
                m.model_name != args.model or (args.revision is not None and m.model_revision != args.revision)
            ):
                continue
            if args.namespace is not None and m.namespace != args.namespace:
                continue
            chosen.append((space, space.keys + space.manifest_keys, True))
            continue
        if m is not None and m.pinned:
            continue  # age-based purges never remove a pinned key space
        if space.oldest is not None:  # the backend knows each page's write time
            old = [p.key for p in _pages_older(space, cutoff)]
            if old:
                chosen.append((space, old, len(old) == space.pages))
        elif m is not None and m.last_write < cutoff:
            chosen.append((space, space.keys + space.manifest_keys, True))
    return chosen


def _pages_older(space: KeySpaceUsage, cutoff: float) -> list[StoredPage]:
    return [page for page in space.records if page.modified is not None and page.modified < cutoff]


def _cmd_purge(args: argparse.Namespace, console: Console) -> int:
    filters = [args.model is not None, args.namespace is not None, args.older_than is not None, args.prefix is not None]
    if sum(filters) != 1:
        raise ConfigError(
            "purge", "choose exactly one of --model (with optional --revision), --namespace, --older-than, --prefix"
        )
    if args.revision is not None and args.model is None:
        raise ConfigError("--revision", "goes with --model")
    with _open(args) as storage:
        spaces = usage_of(storage)
        chosen = _selected(args, spaces)
        total = sum(len(keys) for _, keys, _ in chosen)
        table = Table(title=("would remove" if args.dry_run else "to remove") + f" from {args.backend}")
        for column in ("key space", "model", "revision", "namespace", "pool", "records", "whole key space"):
            table.add_column(column)
        for space, keys, whole in chosen:
            m = space.manifest
            table.add_row(
                space.prefix,
                m.model_name if m else "?",
                m.model_revision if m else "",
                m.namespace if m else "",
                m.pool if m else "?",
                str(len(keys)),
                "yes" if whole else "no",
            )
        console.print(table)
        if args.dry_run or total == 0:
            console.print(f"{total} records {'would be' if args.dry_run else 'are'} removed; nothing was removed")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                raise ConfigError("--yes", "purge asks before deleting; pass --yes to delete without asking")
            answer = input(f"remove {total} records from {len(chosen)} key spaces? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                console.print("nothing removed")
                return 1
        removed = 0
        for _space, keys, _whole in chosen:
            removed += sum(storage.delete_stored(keys))
        console.print(f"removed {removed} of {total} records from {len(chosen)} key spaces")
        return 0 if removed == total else 1


@dataclass
class ProbeResult:
    """One health round trip: per-step seconds and whether each step did what it must."""

    healthy: bool
    steps: dict[str, float]
    error: str | None
    capabilities: dict[str, Any]
    stats: dict[str, Any]


def probe(storage: HiCacheStorage) -> ProbeResult:
    """Write, check, read back (byte-exact) and remove one small page in a key space of its own."""
    pool = HostKVPool(num_pages=2, page_size=4, layer_num=1, head_num=1, head_dim=64, dtype="uint8")
    pool.kv_buffer[:, :4].copy_(torch.randint(0, 256, pool.kv_buffer[:, :4].shape, dtype=torch.uint8))
    storage.register_mem_pool_host(pool)
    key = f"health-{time.time_ns():x}"
    steps: dict[str, float] = {}
    error = None

    def step(name: str, call: Callable[[], bool]) -> bool:
        begin = time.perf_counter()
        ok = call()
        steps[name] = round(time.perf_counter() - begin, 6)
        return ok

    slots, target = torch.arange(4), torch.arange(4, 8)
    healthy = (
        step("set", lambda: storage.batch_set_v1([key], slots) == [True])
        and step("exists", lambda: storage.batch_exists([key]) == 1)
        and step("get", lambda: storage.batch_get_v1([key], target) == [True])
        and bool(torch.equal(pool.kv_buffer[:, :4].view(torch.uint8), pool.kv_buffer[:, 4:8].view(torch.uint8)))
    )
    if healthy and storage.capabilities.supports_delete:
        storage.delete([key])
    if not healthy:
        error = storage.get_stats().get("last_fault") or "a step did not succeed (see steps)"
    return ProbeResult(healthy, steps, error, storage.capabilities.as_dict(), storage.get_stats())


def _bounded_probe(args: argparse.Namespace) -> ProbeResult:
    """The probe on a worker thread, abandoned (unhealthy) after ``--timeout`` seconds."""
    outcome: list[ProbeResult] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            extra = {"manifests": False, **parse_json_option(args.config)}
            storage = load_backend(args.backend, make_config("hicache-storage-health", extra_config=extra))
            try:
                outcome.append(probe(storage))
            finally:
                storage.close()
        except BaseException as exc:  # reported, not raised: health answers with an exit code
            failure.append(exc)

    worker = threading.Thread(target=work, name="hicache-health", daemon=True)
    begin = time.perf_counter()
    worker.start()
    worker.join(args.timeout)
    if outcome:
        return outcome[0]
    reason = f"{type(failure[0]).__name__}: {failure[0]}" if failure else f"no answer within {args.timeout:g} s"
    return ProbeResult(False, {"total": round(time.perf_counter() - begin, 6)}, reason, {}, {})


def _cmd_health(args: argparse.Namespace, console: Console) -> int:
    result = _bounded_probe(args)
    if args.json:
        print(
            json.dumps(
                {
                    "healthy": result.healthy,
                    "steps": result.steps,
                    "error": result.error,
                    "capabilities": result.capabilities,
                },
                indent=2,
            )
        )
    else:
        state = "[green]healthy[/]" if result.healthy else "[red]unhealthy[/]"
        timings = ", ".join(f"{name} {seconds * 1e3:.1f} ms" for name, seconds in result.steps.items())
        console.print(
            f"{args.backend}: {state} ({timings})" + (f": {result.error}" if result.error else ""), highlight=False
        )
        if result.capabilities:
            declared = [name for name, value in result.capabilities.items() if value is True]
            console.print("capabilities: " + ", ".join(declared), highlight=False)
    return 0 if result.healthy else 1


def _cmd_metrics(args: argparse.Namespace, console: Console) -> int:
    result = _bounded_probe(args)
    if not result.stats:
        raise InvalidRequestError(f"{args.backend}: no metrics, the probe did not run: {result.error}")
    text = prometheus_text(result.stats, {"source": "probe"})
    if args.textfile:
        write_textfile(args.textfile, text)
    else:
        sys.stdout.write(text)
    return 0 if result.healthy else 1


def _backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("backend", help="backend name (entry point) or module:Class")
    parser.add_argument("--config", help="backend options as JSON or @file (the same extra_config the engine uses)")
    parser.add_argument("--model-name", help="model name of the config (the key spaces of every model are seen anyway)")


def add_commands(sub: Any) -> None:
    """Register ``usage``, ``purge``, ``health`` and ``metrics`` on the ``hicache-storage`` parser."""
    usage = sub.add_parser("usage", help="pages and bytes per key space (model, revision, namespace, pool)")
    _backend_arguments(usage)
    usage.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    usage.set_defaults(handler=_cmd_usage)

    purge = sub.add_parser("purge", help="remove the pages of chosen key spaces, or pages older than an age")
    _backend_arguments(purge)
    purge.add_argument("--model", help="remove every key space of this model")
    purge.add_argument("--revision", help="with --model: only this revision")
    purge.add_argument("--namespace", help="remove every key space of this namespace")
    purge.add_argument(
        "--older-than", help="remove pages written longer ago than this (e.g. 1d, 12h); pinned key spaces stay"
    )
    purge.add_argument("--prefix", help="remove one key space by its prefix (as usage lists it)")
    purge.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    purge.add_argument("--yes", action="store_true", help="do not ask before deleting")
    purge.set_defaults(handler=_cmd_purge)

    health = sub.add_parser("health", help="one bounded round trip; exit code 0 when healthy, 1 when not")
    _backend_arguments(health)
    health.add_argument("--timeout", type=float, default=10.0, help="seconds before the store counts as unhealthy")
    health.add_argument("--json", action="store_true", help="print JSON")
    health.set_defaults(handler=_cmd_health)

    metrics = sub.add_parser("metrics", help="Prometheus text of a probed instance (stdout or --textfile)")
    _backend_arguments(metrics)
    metrics.add_argument("--timeout", type=float, default=10.0, help="seconds before the probe is abandoned")
    metrics.add_argument("--textfile", help="write atomically to this .prom file (node_exporter textfile collector)")
    metrics.set_defaults(handler=_cmd_metrics)
