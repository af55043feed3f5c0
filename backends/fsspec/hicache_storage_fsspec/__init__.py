"""Storage backend for hicache-storage over any fsspec filesystem (entry point ``fsspec``)."""

from __future__ import annotations

from .backend import FsspecBackend
from .options import FsspecOptions

__all__ = ["FsspecBackend", "FsspecOptions"]
