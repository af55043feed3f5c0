"""Replay a request trace against a backend: hit rates by tier, oracle ceiling, TTFT."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import TaskID

from ..replay import (
    MODES,
    PRESETS,
    EngineConfig,
    ModelPreset,
    ModelShape,
    ModeResult,
    comparison_table,
    load_model,
    oracle_block_hits,
    read_trace,
    run_replay,
)
from .arguments import positive_float, positive_int
from .progress import progress_bar

__all__ = ["add_arguments", "main", "parse_modes"]


def parse_modes(values: list[str] | None, has_backend: bool) -> list[str]:
    """Modes from repeated and/or comma-separated ``--mode`` values (default: every mode, or ``none``)."""
    if not values:
        return list(MODES) if has_backend else ["none"]
    modes: list[str] = []
    for value in values:
        for mode in (part.strip() for part in value.split(",")):
            if mode not in MODES:
                raise ValueError(f"--mode: unknown mode {mode!r}; expected one of {list(MODES)}")
            if mode not in modes:
                modes.append(mode)
    return modes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the ``replay`` sub-command's arguments."""
    parser.add_argument("trace", help="trace file (JSON lines: timestamp, input_length, output_length, hash_ids)")
    parser.add_argument("--backend", help="storage backend name (needed by modes cache and buffer_only)")
    parser.add_argument("--config", help="backend options (extra_config) as JSON or @file")
    parser.add_argument(
        "--mode",
        action="append",
        help=f"host memory mode, repeatable or comma-separated: {', '.join(MODES)} "
        "(default: all three with --backend, else none)",
    )
    parser.add_argument(
        "--device-tokens", type=positive_int, default=1_048_576, help="device prefix cache size in tokens"
    )
    parser.add_argument(
        "--host-ratio", type=positive_float, help="host/device size ratio (default: 2.0 in cache, 1.2 in buffer_only)"
    )
    parser.add_argument(
        "--page-size", type=positive_int, default=64, help="tokens per page (must divide --block-tokens)"
    )
    parser.add_argument("--block-tokens", type=positive_int, default=512, help="tokens per trace block")
    parser.add_argument("--requests", type=positive_int, help="replay only the first K requests")
    shape = parser.add_mutually_exclusive_group()
    shape.add_argument("--model-shape", help="KV geometry layers,kv_heads,head_dim,dtype (e.g. 32,8,128,bfloat16)")
    shape.add_argument("--bytes-per-token", type=positive_int, help="KV bytes per token (default 32: small, fast runs)")
    parser.add_argument(
        "--model",
        help=f"model geometry: a preset ({', '.join(PRESETS)}) or a JSON file; real bytes are scaled to "
        "--bytes-per-token per KV token, sidecar units alike",
    )
    parser.add_argument(
        "--checkpoint-tokens", type=int, help="with --model: tokens between kept sidecar states (0: run ends only)"
    )
    parser.add_argument(
        "--model-io-gbps",
        type=positive_float,
        help="with --model and the sim backend: charge model-sized I/O at this bandwidth (sets sim_write_gbps "
        "to it times the real/model byte ratio)",
    )
    parser.add_argument("--prefill-tokens-per-s", type=positive_float, default=20_000.0, help="prefill rate for TTFT")
    parser.add_argument("--no-clear", action="store_true", help="do not clear the backend before each mode")
    parser.add_argument(
        "--pass-prefix-keys",
        action="store_true",
        help="name the earlier pages of the chain in every storage call of cache mode (extra_info.prefix_keys), as "
        "SGLang does with hicache_storage_pass_prefix_keys set in its storage extra config",
    )
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--plot", help="write PNG plots to this directory")
    parser.add_argument("--plot-prefix", default="replay", help="file name prefix of the plots")
    parser.add_argument(
        "--fleet",
        help="deployments of several TP sizes over one shared store, e.g. tp2:2,tp4:1 (mode cache, head shards "
        "off and on; needs --model-shape with KV heads divisible by the TP sizes' least common multiple)",
    )


def _shape(args: argparse.Namespace) -> ModelShape:
    if args.model_shape:
        return ModelShape.parse(args.model_shape)
    return ModelShape.from_bytes_per_token(args.bytes_per_token if args.bytes_per_token is not None else 32)


def _model(args: argparse.Namespace) -> ModelPreset | None:
    if args.model is None:
        if args.checkpoint_tokens is not None or args.model_io_gbps is not None:
            raise ValueError("--checkpoint-tokens and --model-io-gbps need --model")
        return None
    if args.model_shape:
        raise ValueError("--model sets the KV geometry; use --bytes-per-token for the real bytes per token")
    return load_model(args.model, args.checkpoint_tokens)


def _engine_config(args: argparse.Namespace, mode: str, model: ModelPreset | None) -> EngineConfig:
    return EngineConfig(
        mode=mode,
        device_tokens=args.device_tokens,
        host_ratio=args.host_ratio,
        page_size=args.page_size,
        block_tokens=args.block_tokens,
        shape=_shape(args),
        prefill_tokens_per_s=args.prefill_tokens_per_s,
        model=model,
        pass_prefix_keys=args.pass_prefix_keys,
    )


def _fleet(args: argparse.Namespace, requests: list[Any], options: dict[str, Any], console: Console) -> int:
    """``--fleet``: the fleet with head shards off, then on; a table per TP size and the JSON."""
    from rich.table import Table

    from ..replay.fleet import parse_fleet, run_fleet

    if args.backend is None:
        raise ValueError("--fleet needs --backend (a store the fleet shares)")
    fleet = parse_fleet(args.fleet)
    config = _engine_config(args, "cache", None)
    runs = [run_fleet(requests, config, fleet, args.backend, options, share=share) for share in (False, True)]
    table = Table(title=f"fleet {args.fleet}: {len(requests):,} requests over one {args.backend} store")
    for column in ("head shards", "deployment", "requests", "storage hits", "all cache hits", "TTFT p50", "TTFT p90"):
        table.add_column(column)
    for run in runs:
        label = f"on (tp_lcm_size={run['tp_lcm_size']})" if run["share"] else "off"
        for name, row in run["by_tp"].items():
            ttft = row["ttft_s"]
            cells = [f"{row['storage_hit_rate']:.1%}", f"{row['cached_hit_rate']:.1%}"]
            cells += [f"{ttft['p50'] * 1e3:.1f} ms", f"{ttft['p90'] * 1e3:.1f} ms"]
            table.add_row(label, name, str(row["requests"]), *cells)
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"fleet": args.fleet, "runs": runs}, indent=2), encoding="utf-8")
    return 0


def main(args: argparse.Namespace, console: Console) -> int:
    """Run the ``replay`` sub-command; returns the exit status."""
    from .arguments import parse_json_option

    modes = parse_modes(args.mode, args.backend is not None)
    if args.requests is not None and args.requests < 1:
        raise ValueError(f"--requests must be positive, got {args.requests}")
    options = parse_json_option(args.config)
    model = _model(args)
    if args.model_io_gbps is not None:
        if args.backend != "sim" or not args.model_io_gbps > 0:
            raise ValueError("--model-io-gbps needs --backend sim and a positive bandwidth")
        assert model is not None
        real = _shape(args)
        options["sim_write_gbps"] = args.model_io_gbps * 2 * real.head_dim / model.kv_bytes_per_token
    requests = read_trace(args.trace, block_tokens=args.block_tokens, limit=args.requests)
    if args.fleet:
        return _fleet(args, requests, options, console)
    configs = [_engine_config(args, mode, model) for mode in modes]
    results: list[ModeResult] = []
    with progress_bar(console) as progress:
        for config in configs:
            bar = progress.add_task(f"replay {config.mode}", total=len(requests))

            def advance(count: int, bar: TaskID = bar) -> None:
                progress.advance(bar, count)

            results.append(
                run_replay(requests, config, args.backend, options, clear=not args.no_clear, progress=advance)
            )
    blocks = oracle_block_hits(requests)
    title = f"trace replay: {Path(args.trace).name}, {len(requests):,} requests, page {args.page_size} tokens"
    if model is not None:
        title += f", model {model.name}"
    console.print(comparison_table(results, title=title))
    console.print(
        f"oracle (infinite cache): {blocks.rate:.1%} of {blocks.total:,} input blocks are prefix hits; "
        f"token ceiling at page granularity {results[0].rate(results[0].oracle_hit_tokens):.1%}",
        highlight=False,
    )
    if args.json:
        payload: dict[str, Any] = {
            "trace": str(args.trace),
            "requests": len(requests),
            "oracle_block_hit_rate": blocks.rate,
            "oracle_blocks": {"hits": blocks.hits, "total": blocks.total},
            "model": model.describe() if model is not None else None,
            "backend_options": options,
            "results": [r.as_dict() for r in results],
        }
        Path(args.json).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    if args.plot:
        from ..replay.plots import plot_results

        for path in plot_results(results, args.plot, prefix=args.plot_prefix):
            console.print(f"wrote {path}")
    return 1 if any(r.corrupt_pages or r.corrupt_units for r in results) else 0
