"""Helpers of the fsspec backend tests: the test servers of this checkout (scripts/services) and s3fs options."""

from __future__ import annotations

from hicache_storage.testing.fixtures import checkout_services

__all__ = ["SERVICES", "control", "s3_storage_options", "settings"]

SERVICES = checkout_services(__file__)
settings = SERVICES.settings
control = SERVICES.control


def s3_storage_options(env: dict[str, str]) -> dict[str, object]:
    """s3fs ``storage_options`` for the test S3 server."""
    return {
        "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
        "key": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "secret": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
        "client_kwargs": {"region_name": env["HICACHE_TEST_S3_REGION"]},
    }
