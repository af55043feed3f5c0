"""The face for plugin authors: the primitives' base, page records, vectored I/O, lookahead, raw baselines.

A backend subclasses :class:`hicache_storage.HiCacheStorage` (the caller API over
:class:`StoragePrimitives`) and implements the primitives; the helpers here are optional:

- :mod:`~hicache_storage.plugin.page_format`: self-checking page records bound to their storage key;
- :mod:`~hicache_storage.plugin.vectored_io`: ``pwritev``/``preadv`` of page segments;
- :mod:`~hicache_storage.plugin.lookahead`: work on later pages while earlier ones are sent;
- :mod:`~hicache_storage.plugin.raw_baseline`: the raw client benchmarks compare a backend with;
- :func:`secret_option`: an option whose value never appears in an error, a log line or a repr.
"""

from __future__ import annotations

from ..options import secret_option
from .primitives import API_VERSION, StoragePrimitives, UnsupportedOperation
from .raw_baseline import RawBaseline, RawClient

__all__ = ["API_VERSION", "RawBaseline", "RawClient", "StoragePrimitives", "UnsupportedOperation", "secret_option"]
