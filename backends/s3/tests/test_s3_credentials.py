"""The s3 backend against a moto server that enforces IAM authentication (its own, on a spare port).

The checks are the kit's :class:`~hicache_storage.testing.s3_server.S3CredentialChecks`: valid keys
round-trip byte-exact, refused or missing credentials are a ConfigError naming the bucket, misses
when the check is off or a key is revoked, no secret in errors, reprs, stats or logs.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hicache_storage_s3 import S3Backend

from hicache_storage.testing import FAST_RESILIENCE
from hicache_storage.testing.s3_server import AuthS3Server, IamKey, S3CredentialChecks

pytestmark = pytest.mark.timeout(60)


class TestS3Credentials(S3CredentialChecks):
    backend_class = S3Backend
    credential_option = "extra_config.aws_access_key_id"

    def options(
        self, server: AuthS3Server, key: IamKey | None, root: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        credentials = {}
        if key is not None:
            credentials = {"aws_access_key_id": key.access_key_id, "aws_secret_access_key": key.secret_access_key}
        return {
            "bucket": server.bucket,
            "endpoint_url": server.endpoint,
            "region": server.REGION,
            **credentials,
            "prefix": root or f"t{secrets.token_hex(4)}",
            "resilience": FAST_RESILIENCE,
            **extra,
        }

    def root_of(self, backend: Any) -> str:
        """The prefix of the storage's S3 backend."""
        plugin = backend.backend
        assert isinstance(plugin, S3Backend)
        return plugin.root
