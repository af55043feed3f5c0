"""What a backend author implements: :class:`Backend`, built from a :class:`BackendSetup`.

A backend is a byte store for pages. It receives *storage keys* (already validated and mapped
through the pool's :class:`~hicache_storage.keys.KeySpace`), pages as lists of memoryviews, at most
``capabilities.max_batch_size`` of them per call, and a :class:`~hicache_storage.pools.BatchContext`
naming the pool and its page size. The caller's :class:`hicache_storage.HiCacheStorage` holds one
backend (wrapped in the SDK's layers) and does everything else: validation, key mapping, chunking,
deadlines, retries, breakers, statistics, hit policies and the SGLang surface.

Required: ``write_pages``, ``read_pages``, ``pages_exist``. Optional: ``delete_pages``,
``clear_pages``, ``list_stored``, ``release``, ``on_register_pool``, the classmethod
``capabilities_for`` and the class attributes ``Options``, ``capabilities``, ``raw_baseline_class``
and ``api_version``. No other name on the class belongs to the SDK: helpers called ``get``, ``set``,
``close`` or ``stats`` are the author's own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol

from typing_extensions import TypeVar

from ..capabilities import Capabilities
from ..config import HiCacheStorageConfig
from ..errors import UnsupportedOperation
from ..keys import KeySpace
from ..listing import StoredPage
from ..options import NoOptions
from ..page_buffers import PageBuffers
from ..pools.context import BatchContext
from .raw_baseline import RawBaseline

if TYPE_CHECKING:
    from ..pools.host import HostPool

__all__ = ["API_VERSION", "Backend", "BackendSetup", "Counters", "OptionsT"]

#: Version of this contract ("MAJOR.MINOR"); a plugin must share MAJOR and not exceed MINOR.
#: 2.0: a backend implements :class:`Backend` (held by the caller API, no longer its subclass).
API_VERSION = "2.0"

#: A backend's parsed options type (``setup.options``).
OptionsT = TypeVar("OptionsT", default=Any)


class Counters(Protocol):
    """Where a backend counts what it sees (``get_stats()["counters"]``): evictions, integrity failures, ..."""

    def bump(self, name: str, amount: float = 1) -> None:
        """Increase the named counter."""
        ...

    def note(self, message: str) -> None:
        """Record ``message`` as the latest fault description (``get_stats()["last_fault"]``), counting nothing."""
        ...

    def watch_evictions(self, capacity_bytes: int, what: str) -> None:
        """A capacity-bound backend (``what`` names it and its option) declares its capacity: when its
        ``evictions`` counter shows it evicts most of what it is given, the SDK warns (rate-limited log
        line) and counts ``eviction_pressure``."""
        ...


@dataclass(frozen=True)
class BackendSetup(Generic[OptionsT]):
    """What a backend is built with.

    - ``options``: the backend's ``Options`` dataclass, parsed from ``extra_config``;
    - ``capabilities``: this instance's capabilities (``capabilities_for(options)``);
    - ``io_timeout_s``: the timeout to give a client for one I/O call (the resilience deadline, or
      5 s with the policy off); an explicit timeout option of the backend's should take precedence;
    - ``counters``: where to count what the backend sees;
    - ``config``: the storage configuration (ranks, model) the instance serves.
    """

    options: OptionsT
    capabilities: Capabilities
    io_timeout_s: float
    counters: Counters
    config: HiCacheStorageConfig


class Backend(ABC, Generic[OptionsT]):
    """A storage backend's primitives, options and capabilities (see the module docstring).

    Subclass as ``class MyBackend(Backend[MyOptions])`` and set ``Options = MyOptions``; the SDK
    builds it as ``MyBackend(setup)`` with a :class:`BackendSetup`. Primitives may raise: any
    exception becomes misses / ``False`` for its chunk and is counted.
    """

    #: Contract version the backend was written for.
    api_version: ClassVar[str] = API_VERSION
    #: Declared capabilities (an instance's may differ by its options: :meth:`capabilities_for`).
    capabilities: Capabilities = Capabilities()
    #: The options dataclass ``extra_config`` is parsed into.
    Options: ClassVar[type[Any]] = NoOptions
    #: The raw client benchmarks compare this backend with (``None``: none).
    raw_baseline_class: ClassVar[type[RawBaseline] | None] = None

    def __init__(self, setup: BackendSetup[OptionsT]) -> None:
        """Build the backend from ``setup`` (the default keeps nothing)."""

    @classmethod
    def capabilities_for(cls, options: Any) -> Capabilities:
        """Capabilities of an instance built with ``options`` (default: the class's declaration)."""
        return cls.capabilities

    @abstractmethod
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Store each page under its storage key; ``True`` only once the whole page is readable."""

    @abstractmethod
    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Fill each page's segments from storage; ``False`` for a miss or a page failing its checks."""

    @abstractmethod
    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Whether each storage key holds a complete page."""

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Remove pages; ``True`` when the key is absent afterwards. Needs ``supports_delete``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support delete")

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove the pages whose storage key starts with one of ``prefixes`` (the registered pools'
        key-space prefixes), or every page under the configured location for ``None``. Needs ``supports_clear``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support clear")

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Up to ``limit`` stored records whose storage key starts with ``prefix`` (``""``: all), and an
        opaque cursor for the next call (``None`` when done). Needs ``supports_list``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support listing")

    def release(self) -> None:
        """Free connections and other resources (called once, when the caller closes)."""

    def on_register_pool(self, pool: HostPool, keyspace: KeySpace) -> None:
        """Called once per newly attached host pool (sidecars included), e.g. to register its memory."""
