"""hicache-storage: the storage tier (L3) SDK for hierarchical KV caches such as SGLang's HiCache.

Callers use :class:`HiCacheStorage` (built by :func:`load_backend`); backend authors implement
:class:`hicache_storage.plugin.Backend`.
"""

from __future__ import annotations

from .capabilities import Capabilities
from .config import HiCacheStorageConfig, HiCacheStorageExtraInfo, make_config
from .contract import API_VERSION, HiCacheStorage
from .errors import (
    ApiVersionError,
    BackendFault,
    BackendLoadError,
    ConfigError,
    HostPoolError,
    InvalidKeyError,
    InvalidRequestError,
    UnsupportedOperation,
)
from .host_pool import HostKVPool
from .keys import KeySpace, page_hashes, storage_namespace_seed
from .page_buffers import PageBuffers
from .pools import (
    BatchContext,
    HostStatePool,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
    count_pool_hits,
)
from .registry import BackendInfo, available_backends, load_backend, register_backend, resolve_backend

__version__ = "0.1.0"

__all__ = [
    "API_VERSION",
    "ApiVersionError",
    "BackendFault",
    "BackendInfo",
    "BackendLoadError",
    "BatchContext",
    "Capabilities",
    "ConfigError",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "HostKVPool",
    "HostPoolError",
    "HostStatePool",
    "InvalidKeyError",
    "InvalidRequestError",
    "KeySpace",
    "PageBuffers",
    "PoolHitPolicy",
    "PoolName",
    "PoolTransfer",
    "PoolTransferResult",
    "UnsupportedOperation",
    "__version__",
    "available_backends",
    "count_pool_hits",
    "load_backend",
    "make_config",
    "page_hashes",
    "register_backend",
    "resolve_backend",
    "storage_namespace_seed",
]
