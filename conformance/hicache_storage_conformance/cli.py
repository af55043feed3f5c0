"""``hicache-storage conformance BACKEND ...``: run the suite in-process and print the report.

Exit status: 0 when nothing failed, 1 when a test failed, 2 for a usage error (bad arguments,
unknown backend, invalid ``--config``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from hicache_storage import BackendLoadError, ConfigError

from . import selection
from ._version import SUITE_VERSION
from .base import CATEGORIES
from .harness import substitute_tmp as _substitute
from .report import Collector, render, write_json
from .target import parse_capability_overrides, resolve_target

__all__ = ["build_parser", "console_main", "main"]

SUITE_MODULE = Path(__file__).resolve().parent / "suite" / "test_selected.py"


def build_parser(prog: str = "hicache-storage conformance") -> argparse.ArgumentParser:
    """The argument parser (arguments after the word ``conformance``)."""
    parser = argparse.ArgumentParser(prog=prog, description="Run the hicache-storage conformance suite on a backend.")
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
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")
    parser.add_argument("--junitxml", type=Path, metavar="FILE", help="write a JUnit XML report")
    parser.add_argument("--max-examples", type=int, default=25, metavar="N", help="examples of the model-based test")
    parser.add_argument(
        "--capability-override", action="append", default=[], metavar="NAME=VALUE", help="test as if this were declared"
    )
    parser.add_argument("--sglang", action="store_true", help="test only SGLang's surface (auto for non-SDK classes)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's own output too")
    return parser


def main(argv: list[str]) -> int:
    """Run the suite; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        if args.max_examples < 1:
            raise ConfigError("--max-examples", f"must be >= 1, got {args.max_examples}")
        config = selection.parse_config(args.config)
        only = selection.split_categories(args.only, CATEGORIES)
        overrides = parse_capability_overrides(args.capability_override)
        target = resolve_target(args.backend, sglang=True if args.sglang else None, overrides=overrides)
    except (BackendLoadError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    probe_dir = tempfile.mkdtemp(prefix="hicache-conformance-probe-")
    try:
        effective = target.probe(_substitute(config, probe_dir)) if target.sdk else target.declared
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    header = {**target.describe(effective), "suite_version": SUITE_VERSION, "config": config, "only": list(only)}
    selection.use(
        selection.Selection(
            backend=args.backend,
            config=config,
            only=only,
            overrides=overrides,
            max_examples=args.max_examples,
            sglang=True if args.sglang else None,
        )
    )
    collector = Collector()
    pytest_args = [str(SUITE_MODULE), "-p", "no:cacheprovider", "-o", "addopts=", "-o", "python_files=test_*.py"]
    pytest_args += ["-q", "-rN"] if args.verbose else ["-p", "no:terminal"]
    if args.junitxml:
        pytest_args.append(f"--junitxml={args.junitxml}")
    try:
        code = pytest.main(pytest_args, plugins=[collector])
    finally:
        selection.use(None)
    render(Console(), header, collector)
    if args.json:
        write_json(args.json, header, collector)
    counts = collector.counts()
    if counts["failed"] or code not in (
        pytest.ExitCode.OK,
        pytest.ExitCode.NO_TESTS_COLLECTED,
        pytest.ExitCode.TESTS_FAILED,
    ):
        return 1
    return 0


def console_main() -> int:
    """Entry point of the ``hicache-storage-conformance`` console script."""
    return main(sys.argv[1:])
