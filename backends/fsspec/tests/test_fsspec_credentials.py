"""The fsspec backend over s3fs against a moto server that enforces IAM authentication (its own).

The checks are the kit's :class:`~hicache_storage.testing.s3_server.S3CredentialChecks`: valid keys
round-trip byte-exact, refused or missing credentials are a ConfigError naming the bucket, misses
when the check is off or a key is revoked, no secret in errors, reprs, stats or logs.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hicache_storage_fsspec import FsspecBackend

from hicache_storage.testing import FAST_RESILIENCE
from hicache_storage.testing.s3_server import AuthS3Server, IamKey, S3CredentialChecks

pytest.importorskip("s3fs")
pytestmark = pytest.mark.timeout(60)


class TestFsspecS3Credentials(S3CredentialChecks):
    backend_class = FsspecBackend
    credential_option = "extra_config.storage_options"

    def options(
        self, server: AuthS3Server, key: IamKey | None, root: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        storage: dict[str, Any] = {"endpoint_url": server.endpoint, "client_kwargs": {"region_name": server.REGION}}
        if key is not None:
            storage.update(key=key.access_key_id, secret=key.secret_access_key)
        url = f"s3://{server.bucket}/{root or 't' + secrets.token_hex(4)}"
        return {"url": url, "storage_options": storage, "resilience": FAST_RESILIENCE, **extra}

    def root_of(self, backend: Any) -> str:
        """The folder of the storage's fsspec backend inside the bucket (its root is ``<bucket>/<folder>``)."""
        plugin = backend.backend
        assert isinstance(plugin, FsspecBackend)
        return plugin.root.split("/", 1)[1]
