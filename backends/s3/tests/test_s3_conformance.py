"""The conformance suite against the s3 backend on a real S3 server (moto) private to this module.

The stored records are reached through the backend's hooks (``S3Hooks``, by entry point); the fault
category really stops the private server and starts it again (the bucket is created again after
the restart: moto keeps nothing).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_conformance import BackendConformance
from s3_support import PrivateBucket

from hicache_storage.testing.outage import PrivateServices

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def private_bucket(services: PrivateServices) -> Iterator[PrivateBucket]:
    bucket = PrivateBucket(services, f"hc-conf-{secrets.token_hex(4)}")
    bucket.start()
    yield bucket


class TestS3Conformance(BackendConformance):
    backend = "s3"

    @pytest.fixture(autouse=True)
    def _server(self, private_bucket: PrivateBucket) -> None:
        self.server = private_bucket

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        self.server.start()  # again if a failed fault test left it stopped
        return {**self.server.options(), "prefix": f"conf{secrets.token_hex(4)}"}

    def stop_server(self, backend: Any) -> None:
        self.server.stop()

    def start_server(self, backend: Any) -> None:
        self.server.start()
