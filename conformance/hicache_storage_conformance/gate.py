"""Before the suite runs on a selected backend: can it be loaded and built? Which categories run?

Shared by the CLI (one error and exit status 2 instead of a run), and by the suite's conftest and
the pytest plugin (one failing test instead of the same error in every test).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from hicache_storage import BackendLoadError, ConfigError

from .categories import category_of
from .harness import substitute_tmp
from .hooks import find_hooks
from .selection import Selection, current
from .target import BackendUnderTest, cached_target

__all__ = ["SUITE_MODULE", "BuildError", "build_check", "gate_items"]

#: The suite module run on a selected backend.
SUITE_MODULE = Path(__file__).resolve().parent / "selected" / "test_selected.py"
_GATED = pytest.StashKey[set[str]]()


class BuildError(Exception):
    """The selected backend cannot be loaded or built; ``usage`` when the selection or config is wrong."""

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage


def build_check(selection: Selection) -> tuple[BackendUnderTest, Any]:
    """Resolve the backend, its hooks, and build one instance from the config (closed again).

    Returns the target and its effective capabilities; raises :class:`BuildError` with one message
    naming what is wrong (a missing required option: the option).
    """
    try:
        target = cached_target(selection.backend, selection.sglang, tuple(sorted(selection.overrides.items())))
    except (BackendLoadError, ConfigError) as exc:
        raise BuildError(f"cannot load backend {selection.backend!r}: {exc}", usage=True) from exc
    try:
        find_hooks(selection.backend, selection.hooks)
    except BackendLoadError as exc:
        raise BuildError(str(exc), usage=True) from exc
    if not target.sdk:
        return target, target.declared
    scratch = tempfile.mkdtemp(prefix="hicache-conformance-probe-")
    config = json.dumps(selection.config)
    try:
        caps = target.probe(substitute_tmp(selection.config, scratch), strict=True)
    except ConfigError as exc:
        raise BuildError(
            f"backend {selection.backend!r} cannot be built from the config {config}: {exc}", usage=True
        ) from exc
    except Exception as exc:
        raise BuildError(
            f"backend {selection.backend!r} cannot be built from the config {config}: {type(exc).__name__}: {exc}",
            usage=False,
        ) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target, caps


def _is_selected_suite(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    path = getattr(module, "__file__", None)
    return path is not None and Path(path).resolve() == SUITE_MODULE


def _failing_item(parent: Any, message: str) -> pytest.Item:
    def test_backend_can_be_built() -> None:
        pytest.fail(message, pytrace=False)

    return pytest.Function.from_parent(parent, name="test_backend_can_be_built", callobj=test_backend_can_be_built)


def gate_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect categories not selected; replace the suite by one failing test when the backend cannot be built."""
    ours = [item for item in items if _is_selected_suite(item)]
    done = config.stash.setdefault(_GATED, set())
    if not ours or ours[0].nodeid in done:
        return
    done.update(item.nodeid for item in ours)
    try:
        selection = current()
    except ConfigError as exc:
        error: str | None = f"bad conformance selection: {exc}"
    else:
        if selection is None:
            return  # every test skips with "no backend selected"
        error = None
        try:
            build_check(selection)
        except BuildError as exc:
            error = str(exc)
    if error is not None:
        replacement = _failing_item(ours[0].getparent(pytest.Module), error)
        config.hook.pytest_deselected(items=ours)
        kept = [item for item in items if item not in ours]
        items[:] = [replacement, *kept]
        return
    assert selection is not None
    if not selection.only:
        return
    drop = [
        item
        for item in ours
        if category_of(getattr(item, "cls", object), getattr(getattr(item, "function", None), "__name__", ""))
        not in selection.only
    ]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]
