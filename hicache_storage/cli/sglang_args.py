"""``hicache-storage sglang-args BACKEND --config ...``: check a launch configuration, print SGLang's flags.

The options are checked as the backend will check them when SGLang starts (names, types, ranges),
without opening or creating the store; the flags printed on stdout are exactly what
:func:`hicache_storage.integrations.sglang.launch_args` gives, shell-quoted on one line, to paste
after ``python -m sglang.launch_server --model-path ...`` (or to ``eval`` with it); ``--json`` prints
them as a JSON list for tools. A line on stderr names the capabilities the backend will declare.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import Any

from rich.console import Console

from ..integrations.sglang import launch_args
from ..preflight import check_config
from .arguments import parse_json_option

__all__ = ["add_sglang_args_command"]


def _cmd_sglang_args(args: argparse.Namespace, console: Console) -> int:
    options = parse_json_option(args.config)
    checked = check_config(args.backend, options)
    flags = launch_args(args.backend, **options)  # the same check again, then the loader keys
    if args.json:
        print(json.dumps(flags))
    else:
        print(shlex.join(flags))
    declared = ", ".join(name for name, value in checked.capabilities.as_dict().items() if value is True)
    note = Console(stderr=True, soft_wrap=True)
    note.print(f"{args.backend}: options checked; capabilities: {declared}", highlight=False, markup=False)
    directory = checked.store_directory()
    if directory is not None and not directory.exists():
        note.print(f"{directory} does not exist yet: the backend creates it when SGLang starts", markup=False)
    return 0


def add_sglang_args_command(sub: Any) -> None:
    """Register ``sglang-args``."""
    parser = sub.add_parser(
        "sglang-args", help="check a backend configuration and print the SGLang flags that run it (nothing is opened)"
    )
    parser.add_argument("backend", help="backend name (entry point) or module:Class")
    parser.add_argument("--config", help="backend options as JSON or @file (the SDK's keys included)")
    parser.add_argument("--json", action="store_true", help="print the flags as a JSON list")
    parser.set_defaults(handler=_cmd_sglang_args)
