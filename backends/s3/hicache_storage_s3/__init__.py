"""S3 storage backend for hicache-storage (entry point ``s3``)."""

from __future__ import annotations

from .backend import S3Backend
from .options import S3Options

__all__ = ["S3Backend", "S3Options"]
