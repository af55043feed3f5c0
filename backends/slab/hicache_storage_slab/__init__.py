"""Local flash-cache storage backend for hicache-storage (entry point ``slab``)."""

from __future__ import annotations

from .backend import SlabBackend, SlotStore
from .options import PATH_ENV, SlabOptions

__all__ = ["PATH_ENV", "SlabBackend", "SlabOptions", "SlotStore"]
