"""``ResultCheck``: a batch primitive's answer is one bool per key, or it is a fault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..capabilities import Capabilities
from ..page_buffers import PageBuffers
from ..plugin.backend import Backend, Counters
from ..pools.context import BatchContext
from .batch_layer import BatchCall, BatchLayer

__all__ = ["ResultCheck"]


class ResultCheck(BatchLayer):
    """Turns a well-formed answer into plain bools (``item is True``); a malformed one (not a list, or
    not one item per key) is counted as ``contract_violations`` and raised as :class:`TypeError`."""

    def __init__(self, inner: Backend[Any], capabilities: Capabilities, counters: Counters, name: str) -> None:
        super().__init__(inner, capabilities)
        self.counters = counters
        self.name = name

    def run(
        self, op: str, call: BatchCall, keys: Sequence[str], pages: Sequence[PageBuffers] | None, context: BatchContext
    ) -> list[bool]:
        out: Any = call(keys, pages)
        if not isinstance(out, list) or len(out) != len(keys):
            self.counters.bump("contract_violations")
            length = len(out) if isinstance(out, list) else "?"
            raise TypeError(
                f"{self.name} answered a {op} of {len(keys)} keys with {type(out).__name__} of length {length}"
            )
        return [item is True for item in out]
