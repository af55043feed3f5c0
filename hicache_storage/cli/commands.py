"""Sub-commands of ``hicache-storage``: backends, demo, conformance, new-backend, bench, replay.

Exit status of every command (docs/operations.md): 0 ok, 1 unhealthy or failed, 2 bad input. Bad
input is one line on stderr (no traceback), with the closest option named for a mistyped one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__
from ..command_line import Parser, UsageError, parse_arguments
from ..contract import API_VERSION
from ..errors import BackendFault, BackendLoadError, ConfigError, UnsupportedOperation
from .arguments import parse_json_option, positive_int
from .progress import progress_bar

__all__ = ["build_parser", "parse_json_option", "run"]


def _cmd_backends(args: argparse.Namespace, console: Console) -> int:
    from ..registry import available_backends

    infos = available_backends(load=True)
    if args.json:
        rows = [
            {
                "name": i.name,
                "target": i.target,
                "source": i.source,
                "distribution": i.distribution,
                "version": i.version,
                "api_version": i.api_version,
                "capabilities": i.capabilities,
                "error": i.error,
            }
            for i in infos
        ]
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"hicache-storage {__version__} backends (API {API_VERSION})")
    for column in ("name", "distribution", "version", "api", "capabilities", "status"):
        table.add_column(column)
    for info in infos:
        caps = ", ".join(k for k, v in info.capabilities.items() if v is True)
        status = "[green]ok[/]" if info.ok else f"[red]error:[/] {info.error}"
        table.add_row(
            info.name, info.distribution or info.source, info.version or "", info.api_version or "", caps, status
        )
    console.print(table)
    return 0


def _cmd_demo(args: argparse.Namespace, console: Console) -> int:
    from .demo import cleanup, default_demo_backends, run_demo
    from .demo_hybrid import run_hybrid_demo

    if args.backend:
        plans = [(args.backend, parse_json_option(args.config))]
        owned = None
    else:
        plans, owned = default_demo_backends(args.path)
    results = []
    try:
        with progress_bar(console, disable=args.json is not None and not console.is_terminal) as progress:
            for name, extra in plans:
                task = progress.add_task(f"{name}: write + read back", total=2 * args.pages)
                results.append(
                    run_demo(
                        name,
                        extra,
                        pages=args.pages,
                        batch=args.batch,
                        progress=lambda n, task=task: progress.advance(task, n),
                    )
                )
            hybrid = [run_hybrid_demo(name, extra) for name, extra in plans] if not args.no_hybrid else []
    finally:
        cleanup(owned)
    table = Table(title="hicache-storage demo: host pool -> storage -> host pool, every byte verified")
    for column in (
        "backend",
        "pages",
        "bytes",
        "write GB/s",
        "read GB/s",
        "stored",
        "read back",
        "byte-exact",
        "result",
    ):
        table.add_column(column, justify="right")
    for r in results:
        total = r.pages * r.page_bytes
        table.add_row(
            r.backend,
            str(r.pages),
            f"{total / 2**20:.0f} MiB",
            f"{total / r.write_seconds / 1e9:.2f}",
            f"{total / r.read_seconds / 1e9:.2f}",
            str(r.stored),
            str(r.read_back),
            str(r.exact),
            "[green]PASS[/]" if r.ok else "[red]FAIL[/]",
        )
    console.print(table)
    if hybrid:
        console.print(_hybrid_table(hybrid))
    if args.json:
        rows = [{"kind": "kv", **r.as_dict()} for r in results] + [{"kind": "hybrid", **h.as_dict()} for h in hybrid]
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0 if all(r.ok for r in results) and all(h.ok for h in hybrid) else 1


def _hybrid_table(results: list[Any]) -> Table:
    table = Table(
        title="hybrid model (KV + sliding window + Mamba state, multi-pool calls): restore the longest prefix"
    )
    for column in ("backend", "KV pages", "restorable prefixes", "KV exact", "window exact", "state exact", "result"):
        table.add_column(column, justify="right")
    for h in results:
        found = ",".join(str(p) for p in h.restorable_found) or "-"
        table.add_row(
            h.backend,
            str(h.kv_pages),
            found + ("" if h.restorable_found == h.restorable_expected else " (expected node ends)"),
            f"{h.kv_exact}/{h.kv_pages}",
            f"{h.window_exact}/{h.window}",
            "yes" if h.state_exact else "no",
            "[green]PASS[/]" if h.ok else "[red]FAIL[/]",
        )
    return table


#: Entry-point group of sub-commands other distributions add (``name = "module:main"``, main(argv) -> int).
COMMANDS_GROUP = "hicache_storage.commands"
#: Where a sub-command this CLI knows of comes from when no installed distribution provides it.
_KNOWN_COMMANDS = {"conformance": ("run the conformance suite against a backend", "hicache-storage-conformance")}


def _external_command(name: str) -> Callable[[argparse.Namespace, Console], int]:
    def handler(args: argparse.Namespace, console: Console) -> int:
        found = [ep for ep in metadata.entry_points(group=COMMANDS_GROUP) if ep.name == name]
        if not found:
            dist = _KNOWN_COMMANDS.get(name, ("", name))[1]
            console.print(f"[red]The {name} command is not installed:[/] pip install {dist}")
            return 2
        main: Callable[[list[str]], int] = found[0].load()
        return int(main(list(args.rest)))  # "--help" included: the command prints its own help

    return handler


def _cmd_new_backend(args: argparse.Namespace, console: Console) -> int:
    from .scaffold import create_backend_package

    target = create_backend_package(args.name, Path(args.dir))
    console.print(f"created {target}")
    console.print(f"next: pip install -e {target} && hicache-storage conformance {args.name}")
    return 0


def _cmd_bench(args: argparse.Namespace, console: Console) -> int:
    from .bench import main as bench_main

    result: int = bench_main(args, console)
    return result


def _cmd_replay(args: argparse.Namespace, console: Console) -> int:
    from .replay import main as replay_main

    result: int = replay_main(args, console)
    return result


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hicache-storage``."""
    parser = Parser(prog="hicache-storage", description="Storage tier (L3) SDK for KV caches.")
    parser.add_argument("--version", action="version", version=f"hicache-storage {__version__} (API {API_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True)

    backends = sub.add_parser("backends", help="list installed backends, their capabilities and load status")
    backends.add_argument("--json", action="store_true", help="print JSON instead of a table")
    backends.set_defaults(handler=_cmd_backends)

    demo = sub.add_parser("demo", help="write and read back pages through the host pool, verifying every byte")
    demo.add_argument("--backend", help="one backend to use (default: file in a temp dir, then sim)")
    demo.add_argument("--config", help="backend options as JSON or @file (with --backend)")
    demo.add_argument("--path", help="directory for the file backend (default: a temporary directory)")
    demo.add_argument("--pages", type=positive_int, default=2048, help="pages per backend")
    demo.add_argument("--batch", type=positive_int, default=128, help="pages per batch call")
    demo.add_argument("--json", help="also write the results to this JSON file")
    demo.add_argument("--no-hybrid", action="store_true", help="skip the hybrid-model (multi-pool) round trip")
    demo.set_defaults(handler=_cmd_demo)

    helps = {name: text for name, (text, _dist) in _KNOWN_COMMANDS.items()}
    for ep in metadata.entry_points(group=COMMANDS_GROUP):
        helps.setdefault(ep.name, f"provided by {ep.dist.name if ep.dist else ep.value}")
    for name, text in sorted(helps.items()):
        external = sub.add_parser(
            name,
            help=text,
            description=f"{text}; all arguments are passed to it (see --help there).",
            add_help=False,
            prefix_chars="\x00",  # nothing here is an option: --help and every flag reach the command's own parser
        )
        external.add_argument("rest", nargs="*")
        external.set_defaults(handler=_external_command(name))

    new = sub.add_parser("new-backend", help="create a new backend plugin package from the template")
    new.add_argument("name", help="backend name (lowercase letters, digits, underscores)")
    new.add_argument("--dir", default=".", help="parent directory of the new package")
    new.set_defaults(handler=_cmd_new_backend)

    from .health import add_health_commands
    from .keyspace import add_keyspace_command
    from .operate import add_usage_command
    from .purge import add_purge_command
    from .sglang_args import add_sglang_args_command

    add_usage_command(sub)
    add_purge_command(sub)
    add_health_commands(sub)
    add_sglang_args_command(sub)
    add_keyspace_command(sub)
    _add_optional(sub, "bench", "hicache_storage.cli.bench", _cmd_bench)
    _add_optional(sub, "replay", "hicache_storage.cli.replay", _cmd_replay)
    return parser


def _add_optional(sub: Any, name: str, module: str, handler: Callable[[argparse.Namespace, Console], int]) -> None:
    """Add a sub-command whose module declares its own arguments via ``add_arguments(parser)``."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    parser = sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None)
    mod.add_arguments(parser)
    parser.set_defaults(handler=handler)


def _error(message: object) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(str(message))}", highlight=False)


def run(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the sub-command; bad input prints one line and returns 2, a failure 1."""
    parser = build_parser()
    try:
        args = parse_arguments(parser, argv)
    except UsageError as exc:
        _error(exc)
        return 2
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough that tables do not wrap
        console = Console(width=160)
    handler: Callable[[argparse.Namespace, Console], int] = args.handler
    try:
        return handler(args, console)
    except (ConfigError, BackendLoadError, UnsupportedOperation, ValueError) as exc:
        _error(exc)
        return 2
    except (BackendFault, OSError) as exc:  # the store failed while the command ran
        _error(f"{type(exc).__name__}: {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(sys.argv[1:]))
