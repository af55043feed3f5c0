"""A backend's statistics in the Prometheus text exposition format (version 0.0.4).

``prometheus_text(storage.get_stats())`` renders what :meth:`HiCacheStorage.get_stats` counts:
pages, hits/misses, bytes, faults and seconds per operation, the latency histogram, named
counters (integrity failures, retries, ...) and each circuit breaker's state. Serve it, or write
it with :func:`write_textfile` where node_exporter's textfile collector reads it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["BREAKER_STATES", "prometheus_text", "write_textfile"]

#: Gauge values of ``hicache_storage_breaker_state``.
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}

_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _label_value(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(values: Mapping[str, object]) -> str:
    if not values:
        return ""
    return "{" + ",".join(f'{key}="{_label_value(value)}"' for key, value in values.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Writer:
    def __init__(self, base: Mapping[str, object]) -> None:
        self.base = dict(base)
        self.lines: list[str] = []
        self.declared: set[str] = set()

    def family(self, name: str, kind: str, help_text: str) -> None:
        if name not in self.declared:
            self.declared.add(name)
            self.lines.append(f"# HELP {name} {help_text}")
            self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, **labels: object) -> None:
        self.lines.append(f"{name}{_labels({**self.base, **labels})} {_number(value)}")


_OP_FIELDS = (
    ("calls", "hicache_storage_calls_total", "Storage calls by operation."),
    ("pages", "hicache_storage_pages_total", "Pages asked for by operation."),
    ("ok", "hicache_storage_pages_ok_total", "Pages stored (set), found (exists) or read (get)."),
    ("failed", "hicache_storage_pages_failed_total", "Pages not stored, missing or not read."),
    ("faults", "hicache_storage_faults_total", "Backend faults (exceptions) by operation."),
    ("bytes", "hicache_storage_bytes_total", "Page bytes moved by operation."),
    ("seconds", "hicache_storage_seconds_total", "Seconds spent in storage calls by operation."),
)


def prometheus_text(stats: Mapping[str, Any], labels: Mapping[str, object] | None = None) -> str:
    """Render a ``get_stats()`` snapshot; ``labels`` (e.g. ``{"instance": "rank0"}``) go on every sample."""
    base: dict[str, object] = {"backend": stats.get("backend", "unknown"), **dict(labels or {})}
    out = _Writer(base)
    ops: Mapping[str, Mapping[str, Any]] = stats.get("ops") or {}
    for field, name, help_text in _OP_FIELDS:
        out.family(name, "counter", help_text)
        for op, row in sorted(ops.items()):
            out.sample(name, row.get(field, 0), op=op)
    histograms: Mapping[str, Mapping[str, Any]] = stats.get("latency") or {}
    if histograms:
        name = "hicache_storage_call_seconds"
        out.family(name, "histogram", "Latency of storage calls by operation.")
        for op, histogram in sorted(histograms.items()):
            bounds, counts = histogram["bounds"], histogram["counts"]
            cumulative = 0
            for bound, count in zip(bounds, counts, strict=False):
                cumulative += count
                out.sample(f"{name}_bucket", cumulative, op=op, le=repr(float(bound)))
            total = sum(counts)
            out.sample(f"{name}_bucket", total, op=op, le="+Inf")
            out.sample(f"{name}_sum", histogram.get("sum", 0.0), op=op)
            out.sample(f"{name}_count", total, op=op)
    counters: Mapping[str, float] = stats.get("counters") or {}
    if counters:
        name = "hicache_storage_events_total"
        out.family(name, "counter", "Named backend events (integrity failures, retries, evictions, ...).")
        for event, value in sorted(counters.items()):
            out.sample(name, value, event=_NAME.sub("_", event))
    for direction, breaker in _breakers(stats.get("resilience")):
        out.family("hicache_storage_breaker_state", "gauge", "Circuit breaker state: 0 closed, 1 half-open, 2 open.")
        out.sample(
            "hicache_storage_breaker_state", BREAKER_STATES.get(str(breaker.get("state")), -1), direction=direction
        )
        out.family("hicache_storage_breaker_opened_total", "counter", "Times the circuit breaker opened.")
        out.sample("hicache_storage_breaker_opened_total", breaker.get("times_opened", 0), direction=direction)
    return "\n".join(out.lines) + "\n"


def _breakers(resilience: Any) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(direction, breaker snapshot) pairs from a resilience snapshot (one breaker or one per direction)."""
    if not isinstance(resilience, Mapping):
        return []
    found: list[tuple[str, Mapping[str, Any]]] = []
    single = resilience.get("breaker")
    if isinstance(single, Mapping):
        found.append(("all", single))
    several = resilience.get("breakers")
    if isinstance(several, Mapping):
        found.extend(
            (str(direction), value) for direction, value in sorted(several.items()) if isinstance(value, Mapping)
        )
    return found


def write_textfile(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file + rename), as node_exporter's textfile collector needs."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=".hicache-metrics-", suffix=".prom.tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
