"""The suite run on the backend chosen by the CLI, the pytest plugin or ``HICACHE_CONFORMANCE_BACKEND``.

One test class per category (``TestLifecycle``, ``TestFaults``, ...), so reports and JUnit
classnames group by category. Skipped with a reason when no backend is selected.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from hicache_storage import ConfigError
from hicache_storage_conformance.base import MIXINS, ConformanceBase, _resolve
from hicache_storage_conformance.hooks import ConformanceHooks, find_hooks
from hicache_storage_conformance.selection import ENV_BACKEND, Selection, current
from hicache_storage_conformance.skips import SkipPolicy
from hicache_storage_conformance.target import BackendUnderTest


def _selection() -> Selection:
    try:
        selection = current()
    except ConfigError as exc:
        pytest.fail(f"bad conformance selection: {exc}", pytrace=False)
    if selection is None:
        pytest.skip(f"no backend selected: set {ENV_BACKEND} (an entry-point name or module:Class)")
    return selection


@lru_cache(maxsize=16)
def _hooks(backend: str, explicit: str | None) -> ConformanceHooks:
    return find_hooks(backend, explicit)[0]


class _Selected(ConformanceBase):
    """The selected backend, its options, hooks and skip policy."""

    def resolve_target(self) -> BackendUnderTest:
        selection = _selection()
        type(self).max_examples = selection.max_examples
        try:
            return _resolve(selection.backend, selection.sglang, tuple(sorted(selection.overrides.items())))
        except (ImportError, ValueError) as exc:
            pytest.fail(f"cannot load backend {selection.backend!r}: {exc}", pytrace=False)

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return dict(_selection().config)

    def skip_policy(self) -> SkipPolicy | None:
        return _selection().policy

    def target_hooks(self) -> ConformanceHooks:
        selection = _selection()
        return _hooks(selection.backend, selection.hooks)


def _class_name(category: str) -> str:
    return "Test" + "".join(part.capitalize() for part in category.split("_"))


for _mixin in MIXINS:
    _name = _class_name(str(vars(_mixin)["category"]))
    globals()[_name] = type(_name, (_Selected, _mixin), {"__module__": __name__, "__doc__": _mixin.__doc__})
