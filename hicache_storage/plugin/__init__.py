"""The face for backend authors: everything a backend needs, and nothing of the caller's API.

A backend implements :class:`Backend` (``write_pages``, ``read_pages``, ``pages_exist`` and the
optional primitives) and is built from a :class:`BackendSetup`. Beside it:

- pages and calls: :class:`BatchContext`, :data:`PageBuffers`, :class:`KeySpace`, :class:`HostPool`;
- what it declares: :class:`Capabilities` (:data:`SHARED_STORE`: a durable shared store's), options
  helpers (:func:`secret_option`, :func:`resolve_directory`, :class:`NoOptions`), :class:`RawBaseline`;
- listings: :class:`StoredPage`, :func:`page_after`, :func:`keyspace_prefix_of`;
- deadlines of the running call: :func:`current_deadline`, :func:`time_left`, :func:`deadline_scope`;
- errors: :class:`BackendFault`, :class:`ConfigError`, :class:`InvalidRequestError`, :class:`UnsupportedOperation`;
- submodules: :mod:`.page_format` (self-checking page records), :mod:`.vectored_io`
  (``pwritev``/``preadv`` of page segments), :mod:`.io_threads` (a batch's pages on a few threads),
  :mod:`.lookahead` (work ahead while pages are sent).
"""

from __future__ import annotations

from ..capabilities import SHARED_STORE, Capabilities
from ..errors import BackendFault, ConfigError, InvalidRequestError, UnsupportedOperation
from ..keys import KeySpace
from ..listing import StoredPage, keyspace_prefix_of, page_after
from ..options import SECRET, NoOptions, resolve_directory, secret_option, secret_option_names
from ..page_buffers import PageBuffers, page_nbytes
from ..pools.context import KV_POOL, BatchContext
from ..pools.host import HostPool
from ..resilience import current_deadline, deadline_scope, time_left
from .backend import API_VERSION, Backend, BackendSetup, Counters, OptionsT
from .raw_baseline import RawBaseline, RawClient, raw_baseline_for

__all__ = [
    "API_VERSION",
    "KV_POOL",
    "SECRET",
    "SHARED_STORE",
    "Backend",
    "BackendFault",
    "BackendSetup",
    "BatchContext",
    "Capabilities",
    "ConfigError",
    "Counters",
    "HostPool",
    "InvalidRequestError",
    "KeySpace",
    "NoOptions",
    "OptionsT",
    "PageBuffers",
    "RawBaseline",
    "RawClient",
    "StoredPage",
    "UnsupportedOperation",
    "current_deadline",
    "deadline_scope",
    "keyspace_prefix_of",
    "page_after",
    "page_nbytes",
    "raw_baseline_for",
    "resolve_directory",
    "secret_option",
    "secret_option_names",
    "time_left",
]
