"""Helpers of the s3 backend tests: the checkout's test servers (scripts/services) and S3 options."""

from __future__ import annotations

from hicache_storage.testing import s3_backend_options, s3_client
from hicache_storage.testing.fixtures import checkout_services
from hicache_storage.testing.outage import PrivateServices

__all__ = ["SERVICES", "PrivateBucket", "s3_client", "s3_options", "settings"]

#: The checkout's shared test servers: started when needed, never stopped by these tests.
SERVICES = checkout_services(__file__)
settings = SERVICES.settings


def s3_options(env: dict[str, str], bucket: str) -> dict[str, object]:
    """Backend options for ``bucket`` on the test S3 server that ``env`` describes."""
    return s3_backend_options(env, bucket)


class PrivateBucket:
    """A bucket on the S3 server of ``services`` (a private one a test may stop), created again after
    every start (moto keeps nothing across a restart)."""

    def __init__(self, services: PrivateServices, name: str) -> None:
        self.services = services
        self.name = name
        self.env = services.settings()
        self.running = False

    def start(self) -> None:
        """Start the server and create the bucket, unless this object started it and has not stopped it since."""
        if not self.running:
            self.services.ctl("start", "s3")
            self.services.s3_bucket(self.name, self.env)
            self.running = True

    def stop(self) -> None:
        self.running = False
        self.services.ctl("stop", "s3")

    def options(self) -> dict[str, object]:
        """Backend options for this bucket."""
        return s3_options(self.env, self.name)
