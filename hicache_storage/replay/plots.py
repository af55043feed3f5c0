"""PNG plots of replay results (matplotlib, Agg backend): hit rate over time per tier, TTFT CDF per mode,
and for a hybrid model the hits and losses per component."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np

from .report import ModeResult

__all__ = ["plot_results"]

_TIERS = ("device", "host", "storage")


def _label(result: ModeResult) -> str:
    return result.mode if result.backend is None else f"{result.mode} ({result.backend})"


def plot_results(
    results: list[ModeResult], directory: str | Path, *, prefix: str = "replay", windows: int = 40
) -> list[Path]:
    """Write ``<prefix>-hit-rate.png`` and ``<prefix>-ttft-cdf.png`` under ``directory``; returns the paths.

    With a hybrid model the hit-rate plot also shows, hatched above the hits, the tokens whose KV was
    there but whose prefix a missing sidecar cut, and ``<prefix>-components.png`` is written too.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{prefix}-hit-rate.png", out / f"{prefix}-ttft-cdf.png"]

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.4), sharey=True, squeeze=False)
    for axis, result in zip(axes[0], results, strict=True):
        records = result.records
        axis.set_title(_label(result), fontsize=9)
        if not records:
            continue
        edges = np.linspace(0, len(records), min(windows, max(len(records), 1)) + 1).astype(int)
        # step="post": window i spans from its first request to the next window's first request
        bounds = [*edges[:-1].tolist(), len(records) - 1]
        minutes = [records[b].timestamp_ms / 60_000 for b in bounds]
        bottom = np.zeros(len(minutes))
        for tier in _TIERS:
            rates = []
            for begin, end in itertools.pairwise(edges):
                chunk = records[begin:end]
                total = sum(r.input_tokens for r in chunk)
                hit = sum(getattr(r, f"{tier}_tokens") for r in chunk)
                rates.append(hit / total if total else 0.0)
            rates.append(rates[-1])
            axis.fill_between(minutes, bottom, bottom + np.asarray(rates), step="post", label=tier, alpha=0.8)
            bottom = bottom + np.asarray(rates)
        if result.sidecars:
            lost = []
            for begin, end in itertools.pairwise(edges):
                chunk = records[begin:end]
                total = sum(r.input_tokens for r in chunk)
                lost.append(sum(r.lost_tokens for r in chunk) / total if total else 0.0)
            lost.append(lost[-1])
            axis.fill_between(
                minutes,
                bottom,
                bottom + np.asarray(lost),
                step="post",
                label="lost: sidecar missing",
                hatch="//",
                facecolor="none",
                linewidth=0,
                edgecolor="grey",
            )
        axis.axhline(result.rate(result.oracle_hit_tokens), color="black", linestyle="--", linewidth=1, label="oracle")
        axis.set_xlabel("trace time (min)")
    axes[0][0].set_ylabel("hit rate (tokens)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, axis = plt.subplots(figsize=(5.5, 3.6))
    for result in results:
        ttft = np.sort(np.asarray([r.ttft_seconds for r in result.records], dtype=np.float64)) * 1e3
        if ttft.size:
            axis.plot(ttft, np.arange(1, ttft.size + 1) / ttft.size, label=_label(result))
    axis.set_xscale("log")
    axis.set_xlabel("TTFT estimate (ms)")
    axis.set_ylabel("fraction of requests")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    if any(result.sidecars for result in results):
        paths.append(_components_plot(plt, results, out / f"{prefix}-components.png"))
    return paths


def _components_plot(plt: Any, results: list[ModeResult], path: Path) -> Path:
    """Per mode: KV hit tokens by tier, tokens lost to a missing sidecar, and sidecar units loaded by tier."""
    names = sorted({name for result in results for name in result.sidecars})
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    x = np.arange(len(results))
    bottom = np.zeros(len(results))
    for tier in _TIERS:
        values = np.asarray([r.rate(r.hit_tokens[tier]) for r in results])
        left.bar(x, values, bottom=bottom, label=f"KV hit {tier}")
        bottom += values
    lost = np.asarray([r.rate(r.lost_tokens) for r in results])
    left.bar(x, lost, bottom=bottom, label="lost: sidecar missing", hatch="//", color="none", edgecolor="grey")
    left.axhline(
        results[0].rate(results[0].oracle_hit_tokens), color="black", linestyle="--", linewidth=1, label="oracle"
    )
    left.set_xticks(x, [_label(r) for r in results], fontsize=7)
    left.set_ylabel("share of input tokens")
    left.legend(fontsize=7)
    width = 0.8 / max(1, 2 * len(names))
    for number, name in enumerate(names):
        for side, tier in enumerate(("host", "storage")):
            offset = (2 * number + side) * width - 0.4 + width / 2
            units = [r.sidecars.get(name, {}).get(f"units_from_{tier}", 0) for r in results]
            right.bar(x + offset, units, width, label=f"{name} from {tier}")
    right.set_xticks(x, [_label(r) for r in results], fontsize=7)
    right.set_ylabel("sidecar units loaded")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
