"""Helpers of the s3 backend tests: the test servers of this checkout (scripts/services) and S3 options."""

from __future__ import annotations

from hicache_storage.testing import s3_backend_options, s3_client
from hicache_storage.testing.fixtures import checkout_services

__all__ = ["SERVICES", "control", "s3_client", "s3_options", "settings"]

SERVICES = checkout_services(__file__)
settings = SERVICES.settings
control = SERVICES.control


def s3_options(env: dict[str, str], bucket: str) -> dict[str, object]:
    """Backend options for ``bucket`` on the test S3 server."""
    return s3_backend_options(env, bucket)
