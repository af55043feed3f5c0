"""Conformance suite for hicache-storage backends.

Four ways over one body of tests: the ``hicache-storage conformance`` CLI (:func:`cli.main`),
:class:`BackendConformance` subclassed in a plugin's own pytest suite, the pytest plugin
(``pytest --hicache-backend NAME``) and ``HICACHE_CONFORMANCE_BACKEND=name pytest --pyargs
hicache_storage_conformance.selected`` in CI. A backend's test-only hooks live on a
:class:`ConformanceHooks`, outside the backend class.

The names below are imported on first use, so importing the package (as pytest does for its
plugin) stays cheap and leaves the suite's modules to be imported, assertion-rewritten, by pytest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import SUITE_VERSION

if TYPE_CHECKING:
    from .base import BackendConformance, ConformanceBase
    from .categories import CATEGORIES
    from .harness import Handle, Harness
    from .hooks import ConformanceHooks, SideChannelUnavailable
    from .pages import PoolSpec
    from .skips import SkipPolicy

__version__ = SUITE_VERSION

_LAZY = {
    "BackendConformance": "base",
    "ConformanceBase": "base",
    "CATEGORIES": "categories",
    "ConformanceHooks": "hooks",
    "Handle": "harness",
    "Harness": "harness",
    "PoolSpec": "pages",
    "SideChannelUnavailable": "hooks",
    "SkipPolicy": "skips",
}

__all__ = [
    "CATEGORIES",
    "SUITE_VERSION",
    "BackendConformance",
    "ConformanceBase",
    "ConformanceHooks",
    "Handle",
    "Harness",
    "PoolSpec",
    "SideChannelUnavailable",
    "SkipPolicy",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
