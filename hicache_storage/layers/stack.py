"""The layer stack one caller instance holds over its backend.

From the top: :class:`~.timing.Timing` → :class:`~.chunking.Chunking` → :class:`~.guard.Guard` →
:class:`~.result_check.ResultCheck` → the given extra layers (the test kit's fault points and
capability overrides) → the author's backend. Operator calls (listings, purges, manifests) take
a second path without the guard, so their faults raise instead of reading as misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..capabilities import Capabilities
from ..plugin.backend import Backend
from ..resilience import ResiliencePolicy
from ..stats import StorageStats
from .chunking import Chunking
from .guard import Guard
from .result_check import ResultCheck
from .timing import Timing

__all__ = ["LayerFactory", "Stack", "build_stack"]

#: Builds one extra layer over ``inner`` whose stack offers ``capabilities``.
LayerFactory = Callable[[Backend[Any], Capabilities], Backend[Any]]


@dataclass(frozen=True)
class Stack:
    """``backend``: the author's instance; ``engine``: the guarded top; ``operator``: the unguarded path."""

    backend: Backend[Any]
    engine: Backend[Any]
    operator: Backend[Any]
    capabilities: Capabilities


def _capabilities_of(node: Backend[Any], below: Capabilities) -> Capabilities:
    own = vars(node).get("capabilities")
    return own if isinstance(own, Capabilities) else below


def build_stack(
    backend: Backend[Any],
    capabilities: Capabilities,
    *,
    stats: StorageStats,
    policy: ResiliencePolicy | None,
    extra: Sequence[LayerFactory] = (),
) -> Stack:
    """Wrap ``backend`` (whose instance offers ``capabilities``) in the SDK's layers, ``extra`` first."""
    node: Backend[Any] = backend
    for factory in extra:
        node = factory(node, capabilities)
        capabilities = _capabilities_of(node, capabilities)
    checked = ResultCheck(node, capabilities, stats, type(backend).__name__)
    engine = Timing(Chunking(Guard(checked, capabilities, stats, policy), capabilities), capabilities, stats)
    return Stack(backend, engine, Chunking(checked, capabilities), capabilities)
