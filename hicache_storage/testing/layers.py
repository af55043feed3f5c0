"""Layers the test kit puts right over a backend: programmable fault points and capability overrides.

Pass them to :func:`hicache_storage.load_backend` (``layers=[...]``): the SDK's own layers (result
check, guard, chunking, timing) sit above them, so whatever a fault point makes a primitive do is
handled exactly as a fault of the backend itself would be.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..capabilities import Capabilities
from ..layers.base import BATCH_PRIMITIVES, Layer
from ..layers.stack import LayerFactory
from ..page_buffers import PageBuffers
from ..plugin.backend import Backend
from ..pools.context import BatchContext

__all__ = ["FaultPoints", "LayerFactory", "Wrapper", "capability_overrides"]

#: Routes one primitive call: ``wrapper(original, *args)`` where ``original`` is the primitive below.
Wrapper = Callable[..., Any]


class FaultPoints(Layer):
    """Forwards every batch primitive, through a wrapper while an :meth:`interpose` block names it."""

    def __init__(self, inner: Backend[Any], capabilities: Capabilities) -> None:
        super().__init__(inner, capabilities)
        self._wrappers: dict[str, Wrapper] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def interpose(self, primitive: str, wrapper: Wrapper) -> Iterator[None]:
        """Route ``primitive`` (``write_pages``, ``read_pages``, ``pages_exist``, ``delete_pages``) through
        ``wrapper`` for the block; blocks nest (the inner one wins until it ends)."""
        if primitive not in BATCH_PRIMITIVES:
            raise ValueError(f"unknown primitive {primitive!r}; one of {', '.join(BATCH_PRIMITIVES)}")
        with self._lock:
            previous = self._wrappers.get(primitive)
            self._wrappers[primitive] = wrapper
        try:
            yield
        finally:
            with self._lock:
                if previous is None:
                    self._wrappers.pop(primitive, None)
                else:
                    self._wrappers[primitive] = previous

    def _route(self, primitive: str, original: Callable[..., list[bool]], *args: Any) -> list[bool]:
        wrapper = self._wrappers.get(primitive)
        result: list[bool] = original(*args) if wrapper is None else wrapper(original, *args)
        return result

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self._route("write_pages", self.inner.write_pages, keys, pages, context)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        return self._route("read_pages", self.inner.read_pages, keys, pages, context)

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self._route("pages_exist", self.inner.pages_exist, keys, context)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self._route("delete_pages", self.inner.delete_pages, keys, context)


def capability_overrides(overrides: dict[str, Any]) -> LayerFactory:
    """A layer factory declaring ``overrides`` over the backend's capabilities (e.g. ``{"max_batch_size": 4}``).

    Unknown names raise :class:`~hicache_storage.ConfigError` when the layer is built.
    """

    def build(inner: Backend[Any], capabilities: Capabilities) -> Backend[Any]:
        return Layer(inner, capabilities.with_overrides(overrides))

    return build
