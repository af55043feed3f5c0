"""Simulated storage backend for hicache-storage (entry point ``sim``)."""

from __future__ import annotations

from .backend import SimBackend
from .cost import GB, CostModel
from .options import SimOptions
from .store import RawStore, drop_store

__all__ = ["GB", "CostModel", "RawStore", "SimBackend", "SimOptions", "drop_store"]
