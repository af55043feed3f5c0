"""Helpers of the fsspec backend tests: the checkout's test servers (scripts/services) and s3fs options."""

from __future__ import annotations

from hicache_storage.testing.fixtures import checkout_services
from hicache_storage.testing.outage import PrivateServices

__all__ = ["SERVICES", "PrivateS3", "s3_storage_options", "settings"]

#: The checkout's shared test servers: started when needed, never stopped by these tests.
SERVICES = checkout_services(__file__)
settings = SERVICES.settings


def s3_storage_options(env: dict[str, str]) -> dict[str, object]:
    """s3fs ``storage_options`` for the test S3 server that ``env`` describes."""
    return {
        "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
        "key": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "secret": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
        "client_kwargs": {"region_name": env["HICACHE_TEST_S3_REGION"]},
    }


class PrivateS3:
    """Bucket ``bucket`` on the S3 server of ``services`` (a private one a test may stop), created
    again after every start (moto keeps nothing across a restart)."""

    def __init__(self, services: PrivateServices, bucket: str) -> None:
        self.services = services
        self.bucket = bucket
        self.env = services.settings()
        self.running = False

    def start(self) -> None:
        """Start the server and create the bucket, unless this object started it and has not stopped it since."""
        if not self.running:
            self.services.ctl("start", "s3")
            self.services.s3_bucket(self.bucket, self.env)
            self.running = True

    def stop(self) -> None:
        self.running = False
        self.services.ctl("stop", "s3")

    def storage_options(self) -> dict[str, object]:
        """s3fs ``storage_options`` for this server."""
        return s3_storage_options(self.env)
