"""Results of a replay: per-request records, per-mode summaries, the comparison table and JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from rich.table import Table

from .config import EngineConfig
from .oracle import HybridOracle, OracleResult

__all__ = ["ModeResult", "RequestRecord", "comparison_table", "percentiles"]


@dataclass(frozen=True)
class RequestRecord:
    """What one request got from each tier, and its TTFT estimate."""

    index: int
    timestamp_ms: float
    input_tokens: int
    device_tokens: int
    host_tokens: int
    storage_tokens: int
    recomputed_tokens: int
    uncached_tokens: int
    io_seconds: float
    ttft_seconds: float
    lost_tokens: int = 0  # whose KV was cached or stored, recomputed because a sidecar was missing


def percentiles(values: list[float], points: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    """``{"p50": ..., ...}`` (zeros for no values)."""
    if not values:
        return {f"p{p}": 0.0 for p in points}
    found = np.percentile(np.asarray(values, dtype=np.float64), points)
    return {f"p{p}": float(v) for p, v in zip(points, found, strict=True)}


@dataclass
class ModeResult:
    """Summary of one mode's run (``records`` stay in memory for plots; not in :meth:`as_dict`)."""

    mode: str
    backend: str | None
    device_tokens: int
    host_pages: int
    page_size: int
    page_bytes: int
    requests: int
    input_tokens: int
    hit_tokens: dict[str, int]
    recomputed_tokens: int
    uncached_tokens: int
    oracle_hit_tokens: int
    ttft_seconds: dict[str, float]
    io: dict[str, Any]
    gate_drops: dict[str, int]
    corrupt_pages: int
    wall_seconds: float
    model: dict[str, Any] | None = None
    oracle_kv_hit_tokens: int = 0
    oracle_lost_by_component: dict[str, int] = field(default_factory=dict)
    lost_tokens: int = 0
    components: dict[str, Any] = field(default_factory=dict)
    records: list[RequestRecord] = field(default_factory=list, repr=False)

    @classmethod
    def build(
        cls,
        *,
        config: EngineConfig,
        backend: str | None,
        records: list[RequestRecord],
        oracle: OracleResult,
        io: dict[str, Any] | None,
        gate_drops: dict[str, int],
        corrupt_pages: int,
        page_bytes: int,
        host_pages: int,
        wall_seconds: float,
        hybrid_oracle: HybridOracle | None = None,
        components: dict[str, Any] | None = None,
    ) -> ModeResult:
        """Summarise a run; with a hybrid model the ceiling is the hybrid oracle (KV and every sidecar)."""
        return cls(
            mode=config.mode,
            backend=backend,
            device_tokens=config.device_tokens,
            host_pages=host_pages,
            page_size=config.page_size,
            page_bytes=page_bytes,
            requests=len(records),
            input_tokens=sum(r.input_tokens for r in records),
            hit_tokens={
                "device": sum(r.device_tokens for r in records),
                "host": sum(r.host_tokens for r in records),
                "storage": sum(r.storage_tokens for r in records),
            },
            recomputed_tokens=sum(r.recomputed_tokens for r in records),
            uncached_tokens=sum(r.uncached_tokens for r in records),
            oracle_hit_tokens=hybrid_oracle.hits if hybrid_oracle is not None else oracle.hits,
            ttft_seconds=percentiles([r.ttft_seconds for r in records]),
            io=io or {"time_source": None},
            gate_drops=dict(gate_drops),
            corrupt_pages=corrupt_pages,
            wall_seconds=wall_seconds,
            model=config.model.describe() if config.model is not None else None,
            oracle_kv_hit_tokens=oracle.hits,
            oracle_lost_by_component=dict(hybrid_oracle.lost_by_component) if hybrid_oracle is not None else {},
            lost_tokens=sum(r.lost_tokens for r in records),
            components=dict(components or {}),
            records=records,
        )

    @property
    def total_hit_tokens(self) -> int:
        return sum(self.hit_tokens.values())

    def rate(self, tokens: int) -> float:
        """``tokens`` as a fraction of input tokens."""
        return tokens / self.input_tokens if self.input_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (rates included, per-request records left out)."""
        data = asdict(self)
        data.pop("records")
        data["hit_rate"] = {tier: self.rate(n) for tier, n in self.hit_tokens.items()}
        data["hit_rate"]["total"] = self.rate(self.total_hit_tokens)
        data["oracle_hit_rate"] = self.rate(self.oracle_hit_tokens)
        data["oracle_kv_hit_rate"] = self.rate(self.oracle_kv_hit_tokens)
        data["host_bytes"] = self.host_pages * self.page_bytes
        data["ttft_ms"] = {point: seconds * 1e3 for point, seconds in self.ttft_seconds.items()}
        scale = self.components.get("_scale")
        if scale and self.backend:
            data["model_bytes_written"] = self.io["bytes_written"] / scale
            data["model_bytes_read"] = self.io["bytes_read"] / scale
        return data

    @property
    def sidecars(self) -> dict[str, dict[str, Any]]:
        """Per sidecar component: its summary row (empty for a KV-only model)."""
        return {name: row for name, row in self.components.items() if not name.startswith("_")}

    @property
    def corrupt_units(self) -> int:
        """Sidecar units that came back with wrong bytes."""
        return int(self.components.get("_corrupt_units", 0))


def _label(result: ModeResult) -> str:
    return result.mode if result.backend is None else f"{result.mode} ({result.backend})"


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.1f}"


def comparison_table(results: list[ModeResult], title: str = "trace replay") -> Table:
    """One column per mode: hits by tier vs the oracle, TTFT percentiles, bytes and calls."""
    table = Table(title=title)
    table.add_column("metric")
    for result in results:
        table.add_column(_label(result), justify="right")

    def row(name: str, render: Any) -> None:
        table.add_row(name, *(render(r) for r in results))

    row("requests", lambda r: f"{r.requests:,}")
    row("input tokens", lambda r: f"{r.input_tokens:,}")
    row("host pool (pages)", lambda r: f"{r.host_pages:,}")
    for tier in ("device", "host", "storage"):
        row(f"hit {tier}", lambda r, t=tier: f"{r.rate(r.hit_tokens[t]):.1%}")
    row("hit total", lambda r: f"{r.rate(r.total_hit_tokens):.1%}")
    row("oracle ceiling", lambda r: f"{r.rate(r.oracle_hit_tokens):.1%}")
    hybrid = any(r.sidecars for r in results)
    if hybrid:
        row("  of which KV-only ceiling", lambda r: f"{r.rate(r.oracle_kv_hit_tokens):.1%}")
        row("lost: sidecar missing (tokens)", lambda r: f"{r.lost_tokens:,}")
        names = sorted({name for r in results for name in r.sidecars})
        for name in names:
            row(f"{name} units host / storage", lambda r, n=name: _units(r, n))
    row("recomputed tokens", lambda r: f"{r.recomputed_tokens:,}")
    for point in ("p50", "p90", "p99"):
        row(f"TTFT {point} (ms)", lambda r, p=point: f"{r.ttft_seconds[p] * 1e3:,.1f}")
    row("load I/O (s)", lambda r: f"{r.io['seconds']['exists'] + r.io['seconds']['get']:.3f}" if r.backend else "-")
    row("MiB written", lambda r: _mib(r.io["bytes_written"]) if r.backend else "-")
    row("MiB read", lambda r: _mib(r.io["bytes_read"]) if r.backend else "-")
    if any(r.components.get("_scale") for r in results):
        row("model GiB written / read", _model_gib)
    row("storage calls e/g/s", lambda r: _calls(r.io) if r.backend else "-")
    row("backups dropped (pages)", lambda r: _drops(r.gate_drops))
    row("corrupt pages", lambda r: str(r.corrupt_pages))
    if hybrid:
        row("corrupt sidecar units", lambda r: str(r.corrupt_units))
    row("replay wall (s)", lambda r: f"{r.wall_seconds:.1f}")
    return table


def _units(result: ModeResult, name: str) -> str:
    row = result.sidecars.get(name)
    if row is None or not result.backend:
        return "-"
    return f"{row['units_from_host']:,} / {row['units_from_storage']:,}"


def _model_gib(result: ModeResult) -> str:
    scale = result.components.get("_scale")
    if not scale or not result.backend:
        return "-"
    return f"{result.io['bytes_written'] / scale / 2**30:,.1f} / {result.io['bytes_read'] / scale / 2**30:,.1f}"


def _calls(io: dict[str, Any]) -> str:
    return "/".join(f"{io['calls'][k]:,}" for k in ("exists", "get", "set"))


def _drops(drops: dict[str, int]) -> str:
    shown = {k: v for k, v in drops.items() if v and k != "skipped_believed"}
    return ", ".join(f"{k} {v:,}" for k, v in sorted(shown.items())) or "0"
