"""Local flash-cache storage backend for hicache-storage (entry point ``slab``)."""

from __future__ import annotations

from .backend import SlabBackend
from .options import PATH_ENV, SlabOptions
from .raw_store import SlotStore

__all__ = ["PATH_ENV", "SlabBackend", "SlabOptions", "SlotStore"]
