"""pytest plugin: run the suite inside any pytest session, beside a plugin author's own tests.

``pytest --hicache-backend NAME [--hicache-config JSON] [tests/]`` adds the suite (one test class
per category) to the session, on that backend. The plugin does nothing unless
``--hicache-backend`` is given. Options mirror the CLI's: ``--hicache-only``, ``--hicache-hooks``,
``--hicache-capability-override``, ``--hicache-max-examples``, ``--hicache-sglang``, and the skip
policy ``--hicache-profile strict``, ``--hicache-require``, ``--hicache-fail-on-skip`` (a skip the
policy does not accept fails its test, saying what would enable it).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "pytest_addoption",
    "pytest_collect_file",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_unconfigure",
]

_ACTIVE = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hicache", "hicache-storage conformance suite")
    group.addoption("--hicache-backend", metavar="NAME", help="run the conformance suite on this backend")
    group.addoption("--hicache-config", metavar="JSON", default="{}", help="the backend's extra_config (or @file)")
    group.addoption("--hicache-only", action="append", default=[], metavar="CATEGORY", help="categories to run")
    group.addoption("--hicache-hooks", metavar="MODULE:NAME", help="the backend's conformance hooks")
    group.addoption(
        "--hicache-capability-override", action="append", default=[], metavar="NAME=VALUE", help="test as if declared"
    )
    group.addoption("--hicache-max-examples", type=int, default=25, metavar="N", help="examples of the model test")
    group.addoption("--hicache-sglang", action="store_true", help="test only SGLang's surface")
    group.addoption("--hicache-profile", default="default", metavar="PROFILE", help="default or strict")
    group.addoption("--hicache-require", action="append", default=[], metavar="CATEGORY", help="may not skip")
    group.addoption("--hicache-fail-on-skip", action="store_true", help="no suite test may skip")


def pytest_configure(config: pytest.Config) -> None:
    backend = config.getoption("hicache_backend", None)
    if not backend:
        return
    from hicache_storage import BackendLoadError, ConfigError

    from . import selection
    from .categories import CATEGORIES
    from .gate import SUITE_MODULE
    from .skips import parse_policy
    from .target import parse_capability_overrides

    try:
        policy = parse_policy(
            config.getoption("hicache_profile"),
            config.getoption("hicache_require"),
            config.getoption("hicache_fail_on_skip"),
        )
        chosen = selection.Selection(
            backend=str(backend),
            config=selection.parse_config(config.getoption("hicache_config"), what="--hicache-config"),
            only=selection.split_categories(config.getoption("hicache_only"), CATEGORIES),
            overrides=parse_capability_overrides(config.getoption("hicache_capability_override")),
            max_examples=max(1, int(config.getoption("hicache_max_examples"))),
            sglang=True if config.getoption("hicache_sglang") else None,
            hooks=config.getoption("hicache_hooks"),
            policy=policy if policy.active else None,
        )
    except (BackendLoadError, ConfigError) as exc:
        raise pytest.UsageError(f"hicache conformance: {exc}") from exc
    selection.use(chosen)
    config.stash[_ACTIVE] = True
    suite = str(SUITE_MODULE.parent)  # the directory, so node ids read "test_selected.py::TestFaults::..."
    if suite not in config.args:
        config.args.append(suite)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect the suite module even where ``python_files`` would not match its name."""
    if not parent.config.stash.get(_ACTIVE, False) or file_path.name != "test_selected.py":
        return None
    from .gate import SUITE_MODULE

    patterns = parent.config.getini("python_files")
    if file_path.resolve() != SUITE_MODULE or any(fnmatch.fnmatch(file_path.name, p) for p in patterns):
        return None
    return pytest.Module.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    if not config.stash.get(_ACTIVE, False):
        return
    from .gate import gate_items

    gate_items(config, items)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_ACTIVE, False):
        from . import selection

        selection.use(None)
