"""PNG plots of replay results (matplotlib, Agg backend): hit rate over time per tier, TTFT CDF per mode."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from .report import ModeResult

__all__ = ["plot_results"]

_TIERS = ("device", "host", "storage")


def _label(result: ModeResult) -> str:
    return result.mode if result.backend is None else f"{result.mode} ({result.backend})"


def plot_results(
    results: list[ModeResult], directory: str | Path, *, prefix: str = "replay", windows: int = 40
) -> list[Path]:
    """Write ``<prefix>-hit-rate.png`` and ``<prefix>-ttft-cdf.png`` under ``directory``; returns the paths."""
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
    return paths
