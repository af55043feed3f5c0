"""Test-only hooks of the s3 backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``s3``: the stored
records through :class:`~hicache_storage_s3.raw_store.S3RawStore` (the backend's own boto3 client,
behind its back). There is no outage hook: the backend cannot stop the S3 service it talks to, so
a test that owns its server adds ``stop_server``/``start_server`` of its own.
"""

from __future__ import annotations

from .backend import S3Backend
from .raw_store import S3RawStore

__all__ = ["S3Hooks"]


class S3Hooks:
    """The side channel of :class:`S3Backend`: its page objects as a mapping storage key → record bytes."""

    def raw_store(self, backend: S3Backend) -> S3RawStore:
        return S3RawStore(backend.client, backend.bucket, backend.object_key, backend.list_object_keys)
