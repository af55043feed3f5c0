"""Mooncake Store backend for hicache-storage (entry point ``mooncake``)."""

from __future__ import annotations

from .backend import MooncakeBackend
from .options import MooncakeOptions

__all__ = ["MooncakeBackend", "MooncakeOptions"]
