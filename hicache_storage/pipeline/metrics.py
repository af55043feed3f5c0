"""Pipeline counters, gauges and per-stage latencies, as a dict or Prometheus text."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

__all__ = ["COMPONENT_COUNTERS", "COMPONENT_GAUGES", "COUNTERS", "GAUGES", "STAGES", "PipelineMetrics"]

#: Counter name → help text (all monotonic).
COUNTERS: dict[str, str] = {
    "prefetch_requests": "prefetch requests received",
    "prefetch_hit_tokens": "tokens found in storage by prefetch lookups",
    "prefetch_miss_tokens": "tokens looked up and not found",
    "prefetch_staged_tokens": "tokens read into host memory and staged",
    "prefetch_read_failed_tokens": "tokens found by lookup whose read failed",
    "prefetch_lost_tokens": "tokens whose KV was found in storage but whose prefix a sidecar could not restore",
    "prefetch_loaded_tokens": "tokens copied to the device at admission",
    "prefetch_discarded_tokens": "staged tokens released unused (abort, timeout, moved splice point)",
    "prefetch_parked": "times a prefetch waited for host slots",
    "prefetch_timeouts": "prefetches released after waiting too many ticks",
    "prefetch_aborts": "prefetches aborted by the engine",
    "retained_hit_pages": "pages served from retained host pages without storage I/O",
    "retained_reclaimed_pages": "retained pages reclaimed under memory pressure",
    "backup_offered_tokens": "tokens offered for backup",
    "backup_admitted_tokens": "tokens admitted to the backup queue",
    "backup_skipped_tokens": "tokens skipped: already believed stored or being written",
    "backup_not_selected_tokens": "tokens not selected by write_through_selective",
    "backup_stored_tokens": "tokens acknowledged stored",
    "backup_failed_tokens": "tokens whose write failed",
    "bytes_device_to_host": "bytes copied device to host",
    "bytes_host_to_device": "bytes copied host to device",
    "bytes_written": "bytes acknowledged by storage writes",
    "bytes_read": "bytes read from storage",
    "ticks": "ticks run",
}
#: Gauge name → help text.
GAUGES: dict[str, str] = {
    "backlog_tokens": "tokens admitted for backup and not yet acknowledged",
    "host_used_pages": "host pool pages allocated",
    "staged_prefetches": "prefetches staged and waiting for admission",
    "parked_prefetches": "prefetches waiting for host slots",
    "retained_pages": "host pages retained by the buffer page cache",
}
#: Stage name → help text (latency summaries, seconds of the pipeline's clock).
STAGES: dict[str, str] = {
    "exists": "storage existence lookup",
    "read": "storage read into host memory",
    "write": "storage write from host memory",
    "device_to_host": "device to host copy",
    "host_to_device": "host to device copy",
    "backup_queue": "admission to launch of a backup",
    "staged_wait": "staging to admission of a prefetch",
}
DROP_GATES = ("parent", "backlog", "oversize")
#: Per-component counter name → help text (sidecar components; the KV pool's are the counters above).
COMPONENT_COUNTERS: dict[str, str] = {
    "units_offered": "units a backup offered",
    "units_skipped": "units already believed stored or being written",
    "units_written": "units acknowledged stored",
    "units_write_failed": "units whose write failed",
    "units_read": "units read from storage",
    "units_read_failed": "units whose read failed",
    "units_loaded": "units copied to the device at admission",
    "bytes_device_to_host": "bytes copied device to host",
    "bytes_host_to_device": "bytes copied host to device",
    "bytes_written": "bytes acknowledged by storage writes",
    "bytes_read": "bytes read from storage",
}
#: Per-component gauge name → help text.
COMPONENT_GAUGES: dict[str, str] = {
    "backlog_units": "units admitted for backup and not yet acknowledged",
    "host_used_units": "host units allocated",
}


class PipelineMetrics:
    """Counters, backup drops by gate, gauges and latency summaries (count, sum, max per stage)."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.dropped_tokens: dict[str, int] = dict.fromkeys(DROP_GATES, 0)
        self.gauges: dict[str, int] = dict.fromkeys(GAUGES, 0)
        #: (gate, component) → tokens of the spans that component's gate dropped.
        self.dropped_by_component: dict[tuple[str, str], int] = {}
        #: component → counters (:data:`COMPONENT_COUNTERS`) and gauges (:data:`COMPONENT_GAUGES`).
        self.components: dict[str, dict[str, int]] = {}
        self._latency: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])

    def add(self, name: str, amount: int = 1) -> None:
        """Increase a counter (names in :data:`COUNTERS`)."""
        self.counters[name] += amount

    def drop(self, gate: str, tokens: int, component: str = "kv") -> None:
        """Count tokens dropped by an admission gate, and which component's gate it was."""
        self.dropped_tokens[gate] += tokens
        key = (gate, component)
        self.dropped_by_component[key] = self.dropped_by_component.get(key, 0) + tokens

    def add_component(self, component: str) -> dict[str, int]:
        """Register a sidecar component's counters and gauges (zero); returns its row."""
        row = self.components.get(component)
        if row is None:
            row = self.components[component] = dict.fromkeys([*COMPONENT_COUNTERS, *COMPONENT_GAUGES], 0)
        return row

    def observe(self, stage: str, seconds: float) -> None:
        """Record one latency sample for ``stage``."""
        row = self._latency[stage]
        row[0] += 1
        row[1] += seconds
        row[2] = max(row[2], seconds)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict: counters and gauges by name, ``backup_dropped_tokens`` by gate, ``latency`` by stage."""
        out: dict[str, Any] = dict(self.counters)
        out.update(self.gauges)
        out["backup_dropped_tokens"] = dict(self.dropped_tokens)
        out["backup_dropped_by_component"] = {
            f"{gate}/{component}": tokens for (gate, component), tokens in sorted(self.dropped_by_component.items())
        }
        out["components"] = {name: dict(row) for name, row in self.components.items()}
        out["latency"] = {
            stage: {"count": int(row[0]), "sum_s": row[1], "max_s": row[2]}
            for stage, row in ((s, self._latency[s]) for s in STAGES)
        }
        return out

    def prometheus_text(self, prefix: str = "hicache_pipeline", labels: dict[str, str] | None = None) -> str:
        """Prometheus exposition text (counters ``_total``, gauges, latency summaries ``_seconds``)."""
        base = ",".join(_pair(k, v) for k, v in sorted((labels or {}).items()))

        def lbl(extra: str = "") -> str:
            inner = ",".join(part for part in (base, extra) if part)
            return f"{{{inner}}}" if inner else ""

        lines: list[str] = []
        for name, text in COUNTERS.items():
            metric = f"{prefix}_{name}_total"
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter", f"{metric}{lbl()} {self.counters[name]}"]
        metric = f"{prefix}_backup_dropped_tokens_total"
        lines += [f"# HELP {metric} backup tokens dropped, by admission gate", f"# TYPE {metric} counter"]
        lines += [f"{metric}{lbl(_pair('gate', gate))} {count}" for gate, count in self.dropped_tokens.items()]
        metric = f"{prefix}_backup_dropped_component_tokens_total"
        lines += [f"# HELP {metric} backup tokens dropped, by gate and the component whose gate it was"]
        lines += [f"# TYPE {metric} counter"]
        for (gate, component), tokens in sorted(self.dropped_by_component.items()):
            lines.append(f"{metric}{lbl(_pair('gate', gate) + ',' + _pair('component', component))} {tokens}")
        for name, text in COMPONENT_COUNTERS.items():
            metric = f"{prefix}_component_{name}_total"
            lines += [f"# HELP {metric} {text}, per component", f"# TYPE {metric} counter"]
            lines += [f"{metric}{lbl(_pair('component', c))} {row[name]}" for c, row in self.components.items()]
        for name, text in COMPONENT_GAUGES.items():
            metric = f"{prefix}_component_{name}"
            lines += [f"# HELP {metric} {text}, per component", f"# TYPE {metric} gauge"]
            lines += [f"{metric}{lbl(_pair('component', c))} {row[name]}" for c, row in self.components.items()]
        for name, text in GAUGES.items():
            metric = f"{prefix}_{name}"
            lines += [f"# HELP {metric} {text}", f"# TYPE {metric} gauge", f"{metric}{lbl()} {self.gauges[name]}"]
        metric = f"{prefix}_stage_seconds"
        lines += [f"# HELP {metric} per-stage latency", f"# TYPE {metric} summary"]
        for stage in STAGES:
            count, total, _ = self._latency[stage]
            lines.append(f"{metric}_sum{lbl(_pair('stage', stage))} {total:.9g}")
            lines.append(f"{metric}_count{lbl(_pair('stage', stage))} {int(count)}")
        return "\n".join(lines) + "\n"


def _pair(name: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{name}="{escaped}"'
