"""Faults the suite injects into any SDK backend, through its primitives, with no hook of the backend's.

The suite builds every instance with fault points right over the backend
(:class:`hicache_storage.testing.layers.FaultPoints`), so a wrapper can route any primitive call
(``handle.interpose(primitive, wrapper)``). The wrappers here make a primitive raise, hang until past the call's
deadline, return a malformed result, or hand the backend page buffers it cannot use: a released
memoryview to ``write_pages`` (reading it raises) and a read-only one to ``read_pages`` (writing
into it raises). The last two reach *inside* the backend: a backend that swallows the error and
answers ``True`` acknowledges a page it never stored, or reports a hit for a page it never read.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from hicache_storage.plugin import current_deadline
from hicache_storage.testing.layers import Wrapper

__all__ = [
    "FAULT_MODES",
    "FAULT_RESILIENCE",
    "InjectedFault",
    "fault_wrapper",
    "poison_read",
    "poison_write",
    "released_page",
]

#: Resilience settings of the fault tests unless the configuration sets its own: short, bounded.
FAULT_RESILIENCE: dict[str, float] = {
    "deadline_s": 0.5,
    "retries": 1,
    "backoff_s": 0.001,
    "backoff_max_s": 0.01,
    "breaker_reset_s": 0.05,
}
#: How a faulted primitive misbehaves.
FAULT_MODES = ("raises", "hangs", "short_result", "not_a_list", "scribbles_then_raises")
#: Longest an injected hang waits when the call has no deadline (resilience off).
HANG_CAP_S = 2.0


class InjectedFault(ConnectionError):
    """The error an injected fault raises (a connection error, as a client would)."""


def _hang() -> None:
    """Block until just past the current call's deadline (a server that stopped answering)."""
    deadline = current_deadline()
    wait = HANG_CAP_S if deadline is None else max(0.0, deadline - time.monotonic())
    time.sleep(min(wait, HANG_CAP_S) + 0.05)


def fault_wrapper(mode: str, primitive: str) -> Wrapper:
    """A wrapper (for ``handle.interpose``) that makes ``primitive`` misbehave as ``mode`` says.

    ``scribbles_then_raises`` writes garbage into the page buffers of a ``read_pages`` call before
    raising (for the other primitives it only raises).
    """
    if mode not in FAULT_MODES:
        raise ValueError(f"unknown fault mode {mode!r}")

    def wrapper(original: Callable[..., Any], keys: Sequence[str], *rest: Any) -> Any:
        if mode == "raises":
            raise InjectedFault("injected by the conformance suite: connection refused")
        if mode == "hangs":
            _hang()
            raise TimeoutError("injected by the conformance suite: no answer before the deadline")
        if mode == "short_result":
            return [True] * max(0, len(keys) - 1)
        if mode == "not_a_list":
            return None
        # scribbles_then_raises: garbage into every page buffer of a read, then an error
        pages = rest[0] if primitive == "read_pages" and rest else []
        for page in pages:
            for segment in page:
                with contextlib.suppress(TypeError, ValueError):
                    segment.cast("B")[:] = b"\x5a" * segment.nbytes
        raise InjectedFault("injected by the conformance suite: connection reset in the middle of a read")

    return wrapper


def released_page(page: Sequence[memoryview]) -> list[memoryview]:
    """Buffers shaped like ``page`` that raise on any use (released memoryviews)."""
    out = []
    for segment in page:
        dead = memoryview(bytearray(segment.nbytes))
        dead.release()
        out.append(dead)
    return out


def poison_write(doomed: set[str]) -> Wrapper:
    """``write_pages`` receives unreadable buffers for the storage keys in ``doomed``."""

    def wrapper(original: Callable[..., Any], keys: Sequence[str], pages: Sequence[Any], *rest: Any) -> Any:
        swapped = [released_page(page) if key in doomed else page for key, page in zip(keys, pages)]
        return original(keys, swapped, *rest)

    return wrapper


def poison_read(doomed: set[str]) -> Wrapper:
    """``read_pages`` receives read-only views of the real host slots for the storage keys in ``doomed``."""

    def wrapper(original: Callable[..., Any], keys: Sequence[str], pages: Sequence[Any], *rest: Any) -> Any:
        swapped = [[s.toreadonly() for s in page] if key in doomed else page for key, page in zip(keys, pages)]
        return original(keys, swapped, *rest)

    return wrapper
