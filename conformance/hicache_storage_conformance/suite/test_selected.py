"""The suite run on the backend chosen by the CLI or by ``HICACHE_CONFORMANCE_BACKEND`` (skipped when unset)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hicache_storage import ConfigError
from hicache_storage_conformance.base import BackendConformance, _resolve
from hicache_storage_conformance.selection import ENV_BACKEND, Selection, current
from hicache_storage_conformance.target import Target


def _selection() -> Selection:
    try:
        selection = current()
    except ConfigError as exc:
        pytest.fail(f"bad conformance selection: {exc}", pytrace=False)
    if selection is None:
        pytest.skip(f"no backend selected: set {ENV_BACKEND} (an entry-point name or module:Class)")
    return selection


class TestSelectedBackend(BackendConformance):
    """Every category, on the selected backend."""

    def resolve_target(self) -> Target:
        selection = _selection()
        type(self).max_examples = selection.max_examples
        try:
            return _resolve(selection.backend, selection.sglang, tuple(sorted(selection.overrides.items())))
        except (ImportError, ValueError) as exc:
            pytest.fail(f"cannot load backend {selection.backend!r}: {exc}", pytrace=False)

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return dict(_selection().config)
