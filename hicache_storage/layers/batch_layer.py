"""``BatchLayer``: a layer that treats the four batch primitives alike, through one ``run`` method."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..page_buffers import PageBuffers
from ..pools.context import BatchContext
from .base import Layer

__all__ = ["BatchCall", "BatchLayer"]

#: A batch primitive bound to its pages: ``call(keys, pages_or_None) -> list[bool]``.
BatchCall = Callable[[Sequence[str], Sequence[PageBuffers] | None], list[bool]]


class BatchLayer(Layer):
    """Routes ``write_pages``/``read_pages``/``pages_exist``/``delete_pages`` through :meth:`run`."""

    def run(
        self, op: str, call: BatchCall, keys: Sequence[str], pages: Sequence[PageBuffers] | None, context: BatchContext
    ) -> list[bool]:
        """Perform one batch call of ``op`` (``set``/``get``/``exists``/``delete``); default: just call."""
        return call(keys, pages)

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self.run("set", _paged(self.inner.write_pages, context), keys, pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self.run("get", _paged(self.inner.read_pages, context), keys, pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self.run("exists", _unpaged(self.inner.pages_exist, context), keys, None, context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self.run("delete", _unpaged(self.inner.delete_pages, context), keys, None, context)


def _paged(
    primitive: Callable[[Sequence[str], Sequence[PageBuffers], BatchContext], list[bool]], context: BatchContext
) -> BatchCall:
    def call(keys: Sequence[str], pages: Sequence[PageBuffers] | None) -> list[bool]:
        assert pages is not None
        return primitive(keys, pages, context)

    return call


def _unpaged(primitive: Callable[[Sequence[str], BatchContext], list[bool]], context: BatchContext) -> BatchCall:
    def call(keys: Sequence[str], _pages: Sequence[Any] | None) -> list[bool]:
        return primitive(keys, context)

    return call
