"""hicache-storage: the storage tier (L3) SDK for hierarchical KV caches such as SGLang's HiCache."""

from __future__ import annotations

from .capabilities import Capabilities
from .config import HiCacheStorageConfig, HiCacheStorageExtraInfo, make_config
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
from .interface import API_VERSION, HiCacheStorage, PageBuffers, UnsupportedOperation
from .keys import KeySpace, page_hashes
from .registry import available_backends, load_backend, register_backend

__version__ = "0.1.0"

__all__ = [
    "API_VERSION",
    "ApiVersionError",
    "BackendFault",
    "BackendLoadError",
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
    "UnsupportedOperation",
    "__version__",
    "available_backends",
    "load_backend",
    "make_config",
    "page_hashes",
    "register_backend",
]
