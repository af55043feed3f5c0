"""``hicache-storage conformance BACKEND ...``: run the suite in-process and print the report.

Exit status: 0 when nothing failed and every skip is accepted, 1 when a test failed, a skip is
not accepted (``--require``, ``--fail-on-skip``, ``--profile strict``) or the backend cannot be
built for another reason than its config, 2 for a usage error (bad arguments, unknown backend,
invalid ``--config``, a backend that cannot be built from its config). On a terminal a progress
bar shows the tests done; ``--fail-fast`` stops at the first failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest
from rich.console import Console

from hicache_storage import BackendLoadError, ConfigError
from hicache_storage.command_line import Parser, UsageError, parse_arguments

from . import selection
from ._version import SUITE_VERSION
from .categories import CATEGORIES
from .gate import SUITE_MODULE, BuildError, build_check
from .hooks import find_hooks
from .progress import ProgressBar
from .report import Collector, render, write_json
from .skips import PROFILES, parse_policy
from .target import parse_capability_overrides

__all__ = ["SUITE_MODULE", "build_parser", "console_main", "main"]

PLUGIN_NAME = "hicache_conformance"


def build_parser(prog: str = "hicache-storage conformance") -> argparse.ArgumentParser:
    """The argument parser (arguments after the word ``conformance``)."""
    parser = Parser(prog=prog, description="Run the hicache-storage conformance suite on a backend.")
    parser.add_argument("backend", help="entry-point name (e.g. file, sim) or module:Class")
    parser.add_argument(
        "--config", default="{}", help="backend extra_config as JSON, or @file.json; '{tmp}' = a temp dir"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CATEGORY",
        help=f"run only these categories: {', '.join(CATEGORIES)}",
    )
    parser.add_argument(
        "--hooks",
        metavar="MODULE:NAME",
        help="the backend's conformance hooks (test-only); default: the entry point "
        "hicache_storage.conformance_hooks named like the backend",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--junitxml", type=Path, metavar="FILE", help="write a JUnit XML report")
    parser.add_argument("--max-examples", type=int, default=25, metavar="N", help="examples of the model-based test")
    parser.add_argument(
        "--capability-override", action="append", default=[], metavar="NAME=VALUE", help="test as if this were declared"
    )
    parser.add_argument("--sglang", action="store_true", help="test only SGLang's surface (auto for non-SDK classes)")
    parser.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="CATEGORY",
        help="categories that must run with no test skipped (repeat or comma-separate)",
    )
    parser.add_argument("--fail-on-skip", action="store_true", help="fail when any test skips")
    parser.add_argument(
        "--profile",
        choices=PROFILES,
        default="default",
        help="strict: fail on any skip that is not for an undeclared capability (what a published plugin's CI runs)",
    )
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing test")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output too")
    return parser


def main(argv: list[str]) -> int:
    """Run the suite; returns the exit status."""
    parser = build_parser()
    try:
        args = parse_arguments(parser, argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    try:
        if args.max_examples < 1:
            raise ConfigError("--max-examples", f"must be >= 1, got {args.max_examples}")
        config = selection.parse_config(args.config)
        only = selection.split_categories(args.only, CATEGORIES)
        overrides = parse_capability_overrides(args.capability_override)
        policy = parse_policy(args.profile, args.require, args.fail_on_skip)
        left_out = [name for name in policy.require if only and name not in only]
        if left_out:
            raise ConfigError("--require", f"categories {left_out} are required but --only leaves them out")
    except (BackendLoadError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    chosen = selection.Selection(
        backend=args.backend,
        config=config,
        only=only,
        overrides=overrides,
        max_examples=args.max_examples,
        sglang=True if args.sglang else None,
        hooks=args.hooks,
    )
    try:
        target, effective = build_check(chosen)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print("no test was run", file=sys.stderr)
        return 2 if exc.usage else 1
    hooks, source = find_hooks(args.backend, args.hooks)
    header = {
        **target.describe(effective),
        "suite_version": SUITE_VERSION,
        "config": config,
        "only": list(only),
        "hooks": hooks.describe() + (f" [{source}]" if source != "none" else ""),
    }
    selection.use(chosen)
    collector = Collector()
    pytest_args = [str(SUITE_MODULE), "-p", "no:cacheprovider", "-p", f"no:{PLUGIN_NAME}", "-o", "addopts="]
    pytest_args += ["-o", "python_files=test_*.py"]
    pytest_args += ["-q", "-rN"] if args.verbose else ["-p", "no:terminal"]
    if args.junitxml:
        pytest_args.append(f"--junitxml={args.junitxml}")
    if args.fail_fast:
        pytest_args.append("-x")
    plugins: list[object] = [collector]
    if not args.verbose:  # pytest's own output would tear the bar
        plugins.append(ProgressBar(Console(stderr=True), args.backend))
    try:
        code = pytest.main(pytest_args, plugins=plugins)
    finally:
        selection.use(None)
    shown = policy if policy.active else None
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough that tables do not wrap
        console = Console(width=160)
    render(console, header, collector, shown)
    ran = len(collector.results)
    if args.fail_fast and ran < collector.collected:
        console.print(f"stopped at the first failure (--fail-fast): {ran} of {collector.collected} tests ran")
    if args.json:
        write_json(args.json, header, collector, shown)
    counts = collector.counts()
    if counts["failed"] or collector.violations(shown):
        return 1
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED, pytest.ExitCode.TESTS_FAILED):
        return 1
    return 0


def console_main() -> int:
    """Entry point of the ``hicache-storage-conformance`` console script."""
    return main(sys.argv[1:])
