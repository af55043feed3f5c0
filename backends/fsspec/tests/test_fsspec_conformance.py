"""The conformance suite against the fsspec backend: memory://, local files, and s3fs on moto.

The stored records are reached through the backend's hooks (``FsspecHooks``, by entry point). For
s3fs the server is private to this module: the fault category really stops it and starts it again;
memory and local files have no server to stop (those fault tests skip).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fsspec_support import PrivateS3
from hicache_storage_conformance import BackendConformance

from hicache_storage.testing.outage import PrivateServices


class TestFsspecMemoryConformance(BackendConformance):
    backend = "fsspec"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {"url": f"memory://conf-{secrets.token_hex(4)}"}


class TestFsspecLocalConformance(BackendConformance):
    backend = "fsspec"
    config: ClassVar[dict[str, Any]] = {"url": "file://{tmp}/pages"}


@pytest.fixture(scope="module")
def private_s3(services: PrivateServices) -> Iterator[PrivateS3]:
    pytest.importorskip("s3fs")
    server = PrivateS3(services, f"hc-fsconf-{secrets.token_hex(4)}")
    server.start()
    yield server


@pytest.mark.services
class TestFsspecS3Conformance(BackendConformance):
    backend = "fsspec"

    @pytest.fixture(autouse=True)
    def _server(self, private_s3: PrivateS3) -> None:
        self.server = private_s3

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        self.server.start()  # again if a failed fault test left it stopped
        return {
            "url": f"s3://{self.server.bucket}/conf{secrets.token_hex(4)}",
            "storage_options": self.server.storage_options(),
        }

    def stop_server(self, backend: Any) -> None:
        self.server.stop()

    def start_server(self, backend: Any) -> None:
        self.server.start()
