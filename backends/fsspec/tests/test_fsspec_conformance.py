"""The conformance suite against the fsspec backend: memory://, local files, and s3fs on moto.

For s3fs the fault category really stops the S3 server (scripts/services/stop.sh) and starts it
again; memory and local files have no server to stop (those fault tests skip).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, ClassVar

from fsspec_support import SERVICES, control, s3_storage_options, settings
from hicache_storage_conformance import BackendConformance

BUCKET = f"hc-fsconf-{secrets.token_hex(4)}"


def ensure_bucket() -> dict[str, str]:
    env = settings()
    SERVICES.s3_bucket(BUCKET, env, exist_ok=True)
    return env


class TestFsspecMemoryConformance(BackendConformance):
    backend = "fsspec"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        return {"url": f"memory://conf-{secrets.token_hex(4)}"}


class TestFsspecLocalConformance(BackendConformance):
    backend = "fsspec"
    config: ClassVar[dict[str, Any]] = {"url": "file://{tmp}/pages"}


class TestFsspecS3Conformance(BackendConformance):
    backend = "fsspec"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        control("start", "s3")
        env = ensure_bucket()
        return {"url": f"s3://{BUCKET}/conf{secrets.token_hex(4)}", "storage_options": s3_storage_options(env)}

    def stop_server(self, backend: Any) -> None:
        control("stop", "s3")

    def start_server(self, backend: Any) -> None:
        control("start", "s3")
        ensure_bucket()
