"""Benchmark: the slab's replacement against an exact LRU of the same bytes and the file backend, by replay.

Every side replays the same first requests of a Mooncake-format conversation trace in ``cache`` mode
(``--device-tokens 32768 --model-shape 2,1,32,bfloat16``) with storage bounded at each budget:

- ``oracle``: the ``sim`` backend with ``capacity_bytes`` at the budget, an exact least-recently-used
  cache of payload bytes (a read makes a page recent; metadata costs nothing);
- ``file``: the ``file`` backend with ``max_bytes`` at the budget (its chain-aware eviction);
- ``slab``: the ``slab`` backend with ``capacity_bytes`` at the budget (the whole store: index, lock
  files and data, so it holds fewer pages than the oracle) and ``read_recency_s`` 0 (every read hit
  makes its page recent, as in the oracle: the replay runs the trace's hours in seconds of wall time,
  so the default gate of one second would cover hundreds of requests);
- ``file+keys`` / ``slab+keys``: the same with every storage call naming the earlier pages of the
  chain (``extra_info.prefix_keys``, what SGLang sends with ``hicache_storage_pass_prefix_keys`` set
  in its storage extra config).

Reported per page size and budget: the share of input tokens loaded from storage per side, the ratio
slab / oracle and slab / file, and over all budgets of a page size the ratio of the summed hits. Hit
ratios do not depend on the machine's load; the run takes a few minutes.

    python benchmarks/bench_slab_replacement.py [--trace T] [--sizes 16k,128k] [--dir /var/tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machine import describe

from hicache_storage.replay import EngineConfig, ModelShape, read_trace, run_replay

SAMPLE = Path(__file__).resolve().parent / "traces" / "conversation_trace_sample.jsonl"
SIDES = ("oracle", "file", "slab", "file+keys", "slab+keys")


@dataclass(frozen=True)
class Setting:
    """One page size: tokens per page, requests replayed, storage budgets (bytes)."""

    name: str
    page_tokens: int
    requests: int
    budgets: tuple[int, ...]


SETTINGS = {
    "16k": Setting("16 KiB pages", 64, 1000, (600_000_000, 1_100_000_000, 1_600_000_000)),
    "128k": Setting("128 KiB pages", 512, 300, (300_000_000, 350_000_000, 400_000_000, 450_000_000, 500_000_000)),
}


def side_options(side: str, budget: int, root: Path) -> tuple[str, dict[str, Any], bool]:
    """(backend, options, pass prefix keys) of one side at ``budget``."""
    keys = side.endswith("+keys")
    name = side.removesuffix("+keys")
    if name == "oracle":
        return "sim", {"capacity_bytes": budget}, keys
    if name == "file":
        return "file", {"path": str(root / side), "max_bytes": budget}, keys
    return "slab", {"path": str(root / side), "capacity_bytes": budget, "read_recency_s": 0}, keys


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"trace": str(args.trace), "settings": {}}
    with tempfile.TemporaryDirectory(prefix="bench-replacement-", dir=args.dir) as workdir:
        root = Path(workdir)
        for key in args.sizes:
            setting = SETTINGS[key]
            requests = read_trace(str(args.trace), block_tokens=512, limit=setting.requests)
            rows = []
            for budget in setting.budgets:
                hits: dict[str, int] = {}
                for side in SIDES:
                    backend, options, keys = side_options(side, budget, root)
                    config = EngineConfig(
                        mode="cache",
                        device_tokens=32768,
                        page_size=setting.page_tokens,
                        shape=ModelShape.parse("2,1,32,bfloat16"),
                        pass_prefix_keys=keys,
                    )
                    result = run_replay(requests, config, backend, options)
                    if result.corrupt_pages:
                        raise RuntimeError(f"{side} returned {result.corrupt_pages} wrong pages")
                    hits[side] = result.hit_tokens["storage"]
                    inputs = sum(r.input_tokens for r in result.records)
                    shutil.rmtree(root / side, ignore_errors=True)
                rows.append({"budget": budget, "input_tokens": inputs, "storage_hit_tokens": hits})
            results["settings"][key] = {
                "name": setting.name,
                "page_tokens": setting.page_tokens,
                "requests": setting.requests,
                "rows": rows,
            }
        left = list(root.iterdir())
    if left:
        raise RuntimeError(f"the replays left data behind: {left}")
    return results


def ratio(numerator: int, denominator: int) -> float | None:
    return round(numerator / denominator, 3) if denominator else None


def report(results: dict[str, Any]) -> list[str]:
    lines = []
    for setting in results["settings"].values():
        lines.append(f"{setting['name']}, {setting['requests']} requests: storage hits (share of input tokens)")
        lines.append("  budget MB  " + "  ".join(f"{side:>9}" for side in SIDES) + "  slab/oracle  slab/file  keys")
        totals = dict.fromkeys(SIDES, 0)
        for row in setting["rows"]:
            hits = row["storage_hit_tokens"]
            for side in SIDES:
                totals[side] += hits[side]
            shares = "  ".join(f"{hits[side] / row['input_tokens']:>9.2%}" for side in SIDES)
            row["ratios"] = {
                "slab/oracle": ratio(hits["slab"], hits["oracle"]),
                "slab/file": ratio(hits["slab"], hits["file"]),
                "slab+keys/oracle": ratio(hits["slab+keys"], hits["oracle"]),
                "slab+keys/file+keys": ratio(hits["slab+keys"], hits["file+keys"]),
            }
            r = row["ratios"]
            lines.append(
                f"  {row['budget'] / 1e6:>9.0f}  {shares}  {r['slab/oracle']!s:>11}  {r['slab/file']!s:>9}  "
                f"{r['slab+keys/oracle']!s:>5}"
            )
        setting["summed_ratios"] = {
            "slab/oracle": ratio(totals["slab"], totals["oracle"]),
            "slab/file": ratio(totals["slab"], totals["file"]),
            "slab+keys/oracle": ratio(totals["slab+keys"], totals["oracle"]),
            "slab+keys/file+keys": ratio(totals["slab+keys"], totals["file+keys"]),
        }
        lines.append(f"  over every budget: {setting['summed_ratios']}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace", type=Path, default=SAMPLE, help="trace (default: the shipped sample)")
    parser.add_argument("--sizes", default="16k,128k", help=f"page sizes, comma-separated: {', '.join(SETTINGS)}")
    parser.add_argument("--requests", type=int, default=None, help="replay only this many requests (a smoke run)")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="multiply every budget (a smoke run)")
    parser.add_argument("--dir", default=None, help="parent directory for the stores (default: system temp dir)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    args.sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    unknown = [size for size in args.sizes if size not in SETTINGS]
    if unknown or not args.sizes:
        parser.error(f"--sizes: unknown {unknown}; expected some of {list(SETTINGS)}")
    if args.requests is not None or args.budget_scale != 1.0:
        for key in args.sizes:
            setting = SETTINGS[key]
            SETTINGS[key] = Setting(
                setting.name,
                setting.page_tokens,
                args.requests or setting.requests,
                tuple(max(8 << 20, int(budget * args.budget_scale)) for budget in setting.budgets),
            )
    results = run(args)
    print("\n".join(report(results)))
    if args.json:
        Path(args.json).write_text(json.dumps({**results, "machine": describe()}, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
