"""``Layer``: a :class:`~hicache_storage.plugin.Backend` that wraps another and forwards every primitive.

Cross-cutting behaviour (chunking, the resilience guard, timing, the test kit's fault points) is a
stack of layers over the author's backend, as middleware over a transport. A layer overrides only
the primitives it changes; ``capabilities`` is what the stack offers from the layer down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..capabilities import Capabilities
from ..keys import KeySpace
from ..listing import StoredPage
from ..page_buffers import PageBuffers
from ..plugin.backend import Backend
from ..pools.context import BatchContext

__all__ = ["BATCH_PRIMITIVES", "Layer", "operation_of"]

#: Batch primitive → the operation name statistics, breakers and faults use.
BATCH_PRIMITIVES = {"write_pages": "set", "read_pages": "get", "pages_exist": "exists", "delete_pages": "delete"}


def operation_of(primitive: str) -> str:
    """The operation a batch primitive performs (``read_pages`` → ``get``)."""
    return BATCH_PRIMITIVES[primitive]


class Layer(Backend[Any]):
    """Forwards every primitive to ``inner``; ``capabilities`` are the stack's from this layer down."""

    def __init__(self, inner: Backend[Any], capabilities: Capabilities) -> None:
        self.inner = inner
        self.capabilities = capabilities

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self.inner.write_pages(keys, pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self.inner.read_pages(keys, pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self.inner.pages_exist(keys, context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self.inner.delete_pages(keys, context)

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        self.inner.clear_pages(prefixes)

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        return self.inner.list_stored(prefix, cursor, limit)

    def release(self) -> None:
        self.inner.release()

    def on_register_pool(self, pool: Any, keyspace: KeySpace) -> None:
        self.inner.on_register_pool(pool, keyspace)
