"""The base a backend author implements: the primitives, options and capabilities of a backend.

Primitives receive *storage keys* (mapped through the pool's :class:`~hicache_storage.keys.KeySpace`),
pages as lists of memoryviews, and a :class:`~hicache_storage.batch_context.BatchContext` naming the
pool and its page size:

- ``write_pages(keys, pages, context) -> list[bool]``: store each page; visible to ``pages_exist``
  only once fully stored.
- ``read_pages(keys, pages, context) -> list[bool]``: fill each page's segments; ``False`` for a
  missing page or one failing its checks.
- ``pages_exist(keys, context) -> list[bool]``: one bool per key.

Optional: ``delete_pages(keys, context)``, ``clear_pages(prefixes)``, ``list_stored``, ``release()``,
``on_register_pool(pool, keyspace)``, the classmethod ``capabilities_for(options)`` and
``raw_baseline_class`` (:mod:`hicache_storage.plugin.raw_baseline`). Backends subclass
:class:`hicache_storage.HiCacheStorage`, which adds the caller API on top of this base.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic

from typing_extensions import TypeVar

from ..batch_context import BatchContext
from ..capabilities import Capabilities
from ..config import SDK_OPTION_NAMES, HiCacheStorageConfig
from ..errors import UnsupportedOperation
from ..keys import KeySpace
from ..listing import StoredPage
from ..options import NoOptions, parse_options
from ..page_buffers import PageBuffers
from ..resilience import ResilienceOptions
from .raw_baseline import RawBaseline, RawClient

__all__ = ["API_VERSION", "OptionsT", "Primitive", "StoragePrimitives", "UnsupportedOperation", "takes_context"]

#: Version of this contract ("MAJOR.MINOR"); a plugin must share MAJOR and not exceed MINOR.
#: 1.1: multi-pool (v2) calls; primitives receive a :class:`BatchContext`.
API_VERSION = "1.1"

#: The backend's parsed options type (``self.options``); ``Any`` for a backend that does not say.
OptionsT = TypeVar("OptionsT", default=Any)
Primitive = Callable[[list[str], Any, BatchContext], list[bool]]

#: Primitive name -> positional parameters before ``context`` (a primitive written for API 1.0 lacks it).
_PRIMITIVE_ARITY = {"write_pages": 2, "read_pages": 2, "pages_exist": 1, "delete_pages": 1}


def takes_context(function: Any, before: int) -> bool:
    """Whether ``function`` takes more than ``before`` positional parameters (besides ``self``) or a ``context``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return True
    if parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters) or any(p.name == "context" for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) > before



class StoragePrimitives(ABC, Generic[OptionsT]):
    """Primitives, options and capabilities of a backend (see the module docstring)."""

    api_version: ClassVar[str] = API_VERSION
    #: Declared capabilities; an instance's may differ by its options (see :meth:`capabilities_for`).
    capabilities: Capabilities = Capabilities()
    #: The options dataclass ``extra_config`` is parsed into (``self.options``).
    Options: ClassVar[type[Any]] = NoOptions
    #: Client I/O timeout (seconds) of a backend whose resilience policy is off (see ``io_timeout_s``).
    DEFAULT_IO_TIMEOUT_S: ClassVar[float] = 5.0
    #: The raw client benchmarks compare this backend with (``None``: none); see :meth:`raw_baseline`.
    raw_baseline_class: ClassVar[type[RawBaseline] | None] = None
    _hc_legacy: ClassVar[frozenset[str]] = frozenset()
    options: OptionsT

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._hc_legacy = frozenset(
            name for name, before in _PRIMITIVE_ARITY.items() if not takes_context(getattr(cls, name), before)
        )

    def _primitive(self, name: str) -> Primitive:
        """The primitive ``name`` as a three-argument call (wrapping one written for API 1.0)."""
        method: Callable[..., list[bool]] = getattr(self, name)
        takes_pages = _PRIMITIVE_ARITY[name] == 2
        if name in self._hc_legacy:  # written for API 1.0: no context
            if takes_pages:
                return lambda keys, pages, _context: method(keys, pages)
            return lambda keys, _pages, _context: method(keys)
        if takes_pages:
            return method
        return lambda keys, _pages, context: method(keys, context)

    @classmethod
    def capabilities_for(cls, options: Any) -> Capabilities:
        """Capabilities of an instance built with ``options`` (default: the class's declaration)."""
        return cls.capabilities

    @abstractmethod
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Store each page under its storage key; ``True`` once the whole page is readable."""

    @abstractmethod
    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Fill each page's segments from storage; ``False`` for a miss or a page failing checks."""

    @abstractmethod
    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Whether each storage key holds a complete page."""

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Remove pages; ``True`` when the key is absent afterwards. Needs ``supports_delete``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support delete")

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove stored pages: those whose storage key starts with one of ``prefixes`` (the registered
        pools' key-space prefixes), or, with ``prefixes=None``, every page under the configured location.

        A backend whose ``clear_pages`` takes no argument (written before this signature) is called
        without one and is expected to remove everything.
        """
        raise UnsupportedOperation(f"{type(self).__name__} does not support clear")

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Up to ``limit`` stored records whose storage key starts with ``prefix`` (``""``: all under the
        configured location), and an opaque cursor for the next call (``None`` when done). Needs ``supports_list``.
        """
        raise UnsupportedOperation(f"{type(self).__name__} does not support listing")

    def release(self) -> None:
        """Free connections and other resources (called once by :meth:`close`)."""

    def on_register_pool(self, pool: Any, keyspace: KeySpace) -> None:
        """Hook for zero-copy backends to register a pool's memory; called once per newly attached pool."""

    @classmethod
    def options_from_config(cls, config: HiCacheStorageConfig) -> tuple[Any, float]:
        """(parsed ``Options``, I/O timeout) an instance built from ``config`` would use, without building one.

        For tools that talk to the same service with the backend's settings (e.g. a raw baseline).
        The timeout is the one :attr:`io_timeout_s` gives; bad options raise :class:`ConfigError`.
        """
        extra = dict(config.extra_config or {})
        options = parse_options(cls.Options, {k: v for k, v in extra.items() if k not in SDK_OPTION_NAMES})
        resilience = ResilienceOptions.from_config(extra.get("resilience"))
        return options, resilience.deadline_s if resilience is not None else cls.DEFAULT_IO_TIMEOUT_S


    @classmethod
    def raw_baseline(cls, config: HiCacheStorageConfig) -> RawClient | None:
        """The raw client for ``config`` (options parsed as an instance would), or ``None`` without one."""
        if cls.raw_baseline_class is None:
            return None
        options, timeout_s = cls.options_from_config(config)
        return cls.raw_baseline_class.from_options(options, timeout_s)
