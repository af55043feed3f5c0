"""The raw-baseline protocol: the backend's own client with none of the SDK, for benchmarks.

A backend names a class satisfying :class:`RawBaseline` in ``raw_baseline_class``; the SDK parses
the options as an instance would and calls ``from_options(options, timeout_s)``, so the class never
imports the backend back. The client does the same work as the backend's primitives with no key
space, no validation and no page format; ``hicache-storage bench`` times the two side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..config import HiCacheStorageConfig
from ..settings import StorageSettings

if TYPE_CHECKING:
    from .backend import Backend

__all__ = ["RawBaseline", "RawClient", "raw_baseline_for"]


class RawClient(Protocol):
    """What a raw baseline does: one call per batch, one bool (or a count) per call's keys."""

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> object:
        """Store each buffer under its key."""
        ...

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> object:
        """Fill each buffer from its key."""
        ...

    def exists(self, keys: Sequence[str]) -> object:
        """Whether each key is stored."""
        ...

    def close(self) -> None:
        """Remove what this client wrote and free its connections."""
        ...


class RawBaseline(RawClient, Protocol):
    """A raw client class built from the backend's parsed options."""

    @classmethod
    def from_options(cls, options: Any, timeout_s: float) -> RawClient:
        """The client for ``options`` (the backend's parsed ``Options``) with I/O timeout ``timeout_s``."""
        ...


def raw_baseline_for(backend: type[Backend[Any]], config: HiCacheStorageConfig) -> RawClient | None:
    """The raw client of ``backend`` for ``config`` (options parsed as an instance's would be), or ``None``.

    Bad options raise :class:`~hicache_storage.ConfigError`; the client's timeout is the backend's I/O timeout.
    """
    if backend.raw_baseline_class is None:
        return None
    settings = StorageSettings.from_config(config)
    options = settings.backend_options(backend.Options)
    return backend.raw_baseline_class.from_options(options, settings.io_timeout_s)
