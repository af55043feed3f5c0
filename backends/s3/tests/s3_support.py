"""Helpers of the s3 backend tests: the test servers of this checkout (scripts/services), S3 options,
and a private moto server that enforces IAM authentication."""

from __future__ import annotations

from pathlib import Path

from hicache_storage.testing import TestServices, s3_client
from hicache_storage.testing_s3 import AuthS3Server, IamKey

__all__ = ["SERVICES", "AuthS3Server", "IamKey", "control", "s3_client", "s3_options", "settings"]

SERVICES = TestServices(Path(__file__).resolve().parents[3])
settings = SERVICES.settings
control = SERVICES.control


def s3_options(env: dict[str, str], bucket: str) -> dict[str, object]:
    """Backend options for ``bucket`` on the test S3 server."""
    return {
        "bucket": bucket,
        "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
        "region": env["HICACHE_TEST_S3_REGION"],
        "aws_access_key_id": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
    }
