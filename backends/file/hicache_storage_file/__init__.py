"""File-system storage backend for hicache-storage (entry point ``file``)."""

from __future__ import annotations

from .backend import FileBackend
from .options import PATH_ENV, FileOptions

__all__ = ["PATH_ENV", "FileBackend", "FileOptions"]
