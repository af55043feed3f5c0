"""Redis / Redis Cluster storage backend for hicache-storage (entry point ``redis``)."""

from __future__ import annotations

from .backend import RedisBackend
from .options import RedisOptions

__all__ = ["RedisBackend", "RedisOptions"]
