"""``hicache-storage health`` and ``metrics``: one bounded round trip that leaves nothing behind.

The probe writes one small page in a key space of its own (no manifest), checks it exists, reads it
back byte for byte and removes it, whatever step failed. On a backend that cannot delete, it writes
nothing and only asks whether an absent page exists (the store answers or it does not). Exit
status: 0 healthy, 1 unhealthy or no answer within ``--timeout``, 2 bad input (configuration,
a store directory that does not exist, a ``--textfile`` directory that does not exist).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from ..contract import HiCacheStorage
from ..errors import ConfigError, InvalidRequestError
from ..host_pool import HostKVPool
from ..metrics import prometheus_text, write_textfile
from .arguments import parse_json_option, positive_float
from .store_access import backend_arguments, check_store, open_store

__all__ = ["ProbeResult", "add_health_commands", "probe"]


@dataclass
class ProbeResult:
    """One health round trip: per-step seconds and whether each step did what it must."""

    healthy: bool
    steps: dict[str, float]
    error: str | None
    capabilities: dict[str, Any]
    stats: dict[str, Any]


def probe(storage: HiCacheStorage) -> ProbeResult:
    """Write, check, read back (byte-exact) and remove one small page in a key space of its own.

    A backend that cannot delete gets a read-only probe: ``exists`` of a page never written.
    """
    pool = HostKVPool(num_pages=2, page_size=4, layer_num=1, head_num=1, head_dim=64, dtype="uint8")
    pool.kv_buffer[:, :4].copy_(torch.randint(0, 256, pool.kv_buffer[:, :4].shape, dtype=torch.uint8))
    storage.register_mem_pool_host(pool)
    key = f"health-{time.time_ns():x}"
    steps: dict[str, float] = {}

    def step(name: str, call: Callable[[], bool]) -> bool:
        begin = time.perf_counter()
        ok = call()
        steps[name] = round(time.perf_counter() - begin, 6)
        return ok

    if not storage.capabilities.supports_delete:  # writing would leave the page behind
        healthy = step("exists", lambda: storage.batch_exists([key]) == 0) and not storage.stats.total_faults()
    else:
        slots, target = torch.arange(4), torch.arange(4, 8)
        stored = False
        try:
            stored = step("set", lambda: storage.batch_set_v1([key], slots) == [True])
            healthy = (
                stored
                and step("exists", lambda: storage.batch_exists([key]) == 1)
                and step("get", lambda: storage.batch_get_v1([key], target) == [True])
                and bool(torch.equal(pool.kv_buffer[:, :4], pool.kv_buffer[:, 4:8]))
            )
        finally:  # removed whatever failed: a partial write included
            removed = step("delete", lambda: storage.delete([key]) == [True])
        healthy = healthy and removed
    error = None if healthy else storage.get_stats().get("last_fault") or "a step did not succeed (see steps)"
    return ProbeResult(healthy, steps, error, storage.capabilities.as_dict(), storage.get_stats())


def _bounded_probe(args: argparse.Namespace, command: str) -> ProbeResult:
    """The probe on a worker thread, abandoned (unhealthy) after ``--timeout`` seconds.

    Bad input (the configuration, a missing store directory) raises before the thread starts.
    """
    check_store(command, args.backend, parse_json_option(args.config))
    outcome: list[ProbeResult] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            with open_store(args, command, manifests=False) as storage:
                outcome.append(probe(storage))
        except BaseException as exc:  # reported, not raised: health answers with an exit code
            failure.append(exc)

    worker = threading.Thread(target=work, name="hicache-health", daemon=True)
    begin = time.perf_counter()
    worker.start()
    worker.join(args.timeout)
    if outcome:
        return outcome[0]
    if failure and isinstance(failure[0], ConfigError):
        raise failure[0]  # the backend refused its configuration when built: bad input
    reason = f"{type(failure[0]).__name__}: {failure[0]}" if failure else f"no answer within {args.timeout:g} s"
    return ProbeResult(False, {"total": round(time.perf_counter() - begin, 6)}, reason, {}, {})


def _cmd_health(args: argparse.Namespace, console: Console) -> int:
    result = _bounded_probe(args, "health")
    if args.json:
        payload = {
            "healthy": result.healthy,
            "steps": result.steps,
            "error": result.error,
            "capabilities": result.capabilities,
        }
        print(json.dumps(payload, indent=2))
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
    if args.textfile:
        folder = Path(args.textfile).expanduser().resolve().parent
        if not folder.is_dir():
            raise ConfigError("--textfile", f"directory {str(folder)!r} does not exist")
    result = _bounded_probe(args, "metrics")
    if not result.stats:
        raise InvalidRequestError(f"{args.backend}: no metrics, the probe did not run: {result.error}")
    text = prometheus_text(result.stats, {"source": "probe"})
    if args.textfile:
        try:
            write_textfile(args.textfile, text)
        except OSError as error:
            raise ConfigError("--textfile", f"cannot write {args.textfile!r}: {error.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0 if result.healthy else 1


def add_health_commands(sub: Any) -> None:
    """Register ``health`` and ``metrics``."""
    health = sub.add_parser("health", help="one bounded round trip; exit code 0 when healthy, 1 when not")
    backend_arguments(health)
    health.add_argument(
        "--timeout", type=positive_float, default=10.0, help="seconds before the store counts as unhealthy"
    )
    health.add_argument("--json", action="store_true", help="print JSON")
    health.set_defaults(handler=_cmd_health)

    metrics = sub.add_parser("metrics", help="Prometheus text of a probed instance (stdout or --textfile)")
    backend_arguments(metrics)
    metrics.add_argument("--timeout", type=positive_float, default=10.0, help="seconds before the probe is abandoned")
    metrics.add_argument("--textfile", help="write atomically to this .prom file (node_exporter textfile collector)")
    metrics.set_defaults(handler=_cmd_metrics)
