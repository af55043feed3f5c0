"""Hooks for every test of this checkout, with or without pytest-xdist (``scripts/test.sh`` runs ``-n``).

- Each xdist worker runs against test servers of its own (:mod:`hicache_storage.testing.workers`),
  stopped when the worker ends; without xdist the checkout's servers serve, as before, unless
  ``HICACHE_TEST_SERVER_SET=N`` names worker N's set (a run beside an xdist run of N workers).
- Under ``--dist loadgroup``, the tests that share a module- or class-scoped fixture run on one
  worker, so that fixture (a private server, a built wheel) is set up once.
- botocore's data files (service models, endpoints) are read once per test process, not once per
  client: each of the hundreds of S3 clients the tests make would otherwise decode the S3 model
  again (about 0.2 s of CPU each). A session's clients share the loader in botocore anyway.
- The terminal summary lists the skipped tests by reason, one line per reason, and (under xdist)
  the figures the reliability tests measured on every worker, merged.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

#: How many leading parts of a test's node id a fixture of each scope is shared by.
SHARED_SCOPES = {"package": 1, "module": 1, "class": 2}
#: The number of the xdist worker this process is (``gw3`` → 3); absent without xdist.
WORKER = pytest.StashKey[int]()
#: What the fault tests measured on the workers (this file's ``pytest_sessionfinish`` hands it over).
RELIABILITY = pytest.StashKey[dict[str, Any]]()
RELIABILITY_OUTPUT = "hicache_reliability"
#: Environment variable: run on the test servers of worker number N (N >= 1), as xdist worker gwN would.
SERVER_SET = "HICACHE_TEST_SERVER_SET"


class _SearchPaths(list[str]):
    """A loader's search paths that a new boto3 session extends only with a path not there yet."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


def share_botocore_loaders() -> None:
    """Make every botocore session of this process share one data loader per data path."""
    try:
        import botocore.loaders
        import botocore.session
    except ImportError:
        return
    original = botocore.loaders.create_loader
    loaders: dict[str | None, Any] = {}

    def create_loader(search_path_string: str | None = None) -> Any:
        loader = loaders.get(search_path_string)
        if loader is None:
            loader = loaders[search_path_string] = original(search_path_string)
            loader._search_paths = _SearchPaths(loader.search_paths)
        return loader

    botocore.session.create_loader = create_loader


def pytest_configure(config: pytest.Config) -> None:
    share_botocore_loaders()
    # The worker itself, not a pytest that one of its tests runs (that inherits PYTEST_XDIST_WORKER).
    worker = getattr(config, "workerinput", {}).get("workerid")
    # A run beside an xdist run (scripts/test.sh runs the SGLang tier so) names a set of servers of its
    # own; popped, so that a pytest one of its tests runs uses this run's servers as they are.
    server_set = os.environ.pop(SERVER_SET, "")
    if worker or server_set:  # imported here: a run without either needs none of it
        from hicache_storage.testing.fixtures import checkout_services
        from hicache_storage.testing.workers import use_worker_servers, worker_number

        number = worker_number(worker) if worker else _server_set_number(server_set)
        if number is not None:
            config.stash[WORKER] = number
            use_worker_servers(checkout_services(Path(__file__).parent), number)


def _server_set_number(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise pytest.UsageError(f"{SERVER_SET}={value!r}: expected the number of a set of test servers, 1 or more")
    return int(value)


def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is not None:  # an xdist worker: hand what the fault tests measured to the controller
        from hicache_storage.testing.fault_figures import FAULT_ROWS, FIGURES

        if FIGURES or FAULT_ROWS:
            output[RELIABILITY_OUTPUT] = json.loads(json.dumps({"figures": FIGURES, "rows": FAULT_ROWS}, default=str))
    if session.config.stash.get(WORKER, 0):  # worker 0 uses the checkout's servers, which outlive the run
        from hicache_storage.testing.fixtures import checkout_services
        from hicache_storage.testing.workers import stop_worker_servers

        stop_worker_servers(checkout_services(Path(__file__).parent))


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The controller has --dist loadgroup; a worker has dist "no" and loadgroup set (and it collects).
    if not config.getoption("loadgroup", False) and config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        definitions = info.name2fixturedefs.values() if info is not None else ()
        depths = [SHARED_SCOPES[defs[-1].scope] for defs in definitions if defs and defs[-1].scope in SHARED_SCOPES]
        if depths and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("::".join(item.nodeid.split("::")[: min(depths)])))


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller, when a worker ends
def pytest_testnodedown(node: Any, error: object) -> None:
    measured = getattr(node, "workeroutput", {}).get(RELIABILITY_OUTPUT)
    if measured:
        merged = node.config.stash.setdefault(RELIABILITY, {"figures": {}, "rows": []})
        merged["figures"].update(measured["figures"])
        merged["rows"].extend(measured["rows"])


def write_reliability_summary(terminalreporter: Any) -> None:
    """The figures the fault tests measured: every worker's, merged (under xdist), else this process's."""
    if hasattr(terminalreporter.config, "workerinput"):
        return
    from hicache_storage.testing.fault_figures import FAULT_ROWS, FIGURES, write_summary

    merged = terminalreporter.config.stash.get(RELIABILITY, {"figures": FIGURES, "rows": FAULT_ROWS})
    write_summary(terminalreporter, merged["figures"], merged["rows"])


def skip_reason(report: Any) -> str:
    """Why ``report`` (a skipped test's) skipped."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    write_reliability_summary(terminalreporter)
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if getattr(r, "longrepr", None) is not None]
    if not skipped:
        return
    reasons = Counter(skip_reason(report) for report in skipped)
    terminalreporter.write_sep("-", f"{len(skipped)} skipped, {len(reasons)} reasons")
    for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0])):
        terminalreporter.write_line(f"SKIPPED {count:4d}  {reason}")
