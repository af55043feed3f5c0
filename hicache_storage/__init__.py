"""hicache-storage: the storage tier (L3) SDK for hierarchical KV caches such as SGLang's HiCache."""

from __future__ import annotations

from .batch_context import BatchContext
from .capabilities import Capabilities
from .config import HiCacheStorageConfig, HiCacheStorageExtraInfo, make_config
from .contract import API_VERSION, HiCacheStorage, PageBuffers, UnsupportedOperation
from .errors import (
    ApiVersionError,
    BackendFault,
    BackendLoadError,
    ConfigError,
    HostPoolError,
    InvalidKeyError,
    InvalidRequestError,
)
from .host_pool import HostKVPool
from .keys import KeySpace, page_hashes, storage_namespace_seed
from .pools import PoolHitPolicy, PoolName, PoolTransfer, PoolTransferResult, count_pool_hits
from .registry import available_backends, load_backend, register_backend

__version__ = "0.1.0"

__all__ = [
    "API_VERSION",
    "ApiVersionError",
    "BackendFault",
    "BackendLoadError",
    "BatchContext",
    "Capabilities",
    "ConfigError",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "HostKVPool",
    "HostPoolError",
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
    "storage_namespace_seed",
]
