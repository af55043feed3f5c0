"""Conformance suite for hicache-storage backends.

Three ways over one body of tests: the ``hicache-storage conformance`` CLI (:func:`cli.main`),
:class:`BackendConformance` subclassed in a plugin's own pytest suite, and
``HICACHE_CONFORMANCE_BACKEND=name pytest --pyargs hicache_storage_conformance.suite`` in CI.
"""

from __future__ import annotations

from ._version import SUITE_VERSION
from .base import CATEGORIES, BackendConformance
from .harness import Handle, Harness
from .pages import PoolSpec
from .side_channel import SideChannelUnavailable

__version__ = SUITE_VERSION

__all__ = [
    "CATEGORIES",
    "SUITE_VERSION",
    "BackendConformance",
    "Handle",
    "Harness",
    "PoolSpec",
    "SideChannelUnavailable",
    "__version__",
]
