"""Deselects categories not asked for (``--only`` / ``HICACHE_CONFORMANCE_ONLY``)."""

from __future__ import annotations

import pytest

from hicache_storage_conformance.base import category_of
from hicache_storage_conformance.selection import current


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        selection = current()
    except ValueError:
        return  # reported by the test fixture itself
    if selection is None or not selection.only:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        cls = getattr(item, "cls", None)
        name = getattr(getattr(item, "function", None), "__name__", "")
        category = category_of(cls, name) if cls is not None else None
        (keep if category in selection.only else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
