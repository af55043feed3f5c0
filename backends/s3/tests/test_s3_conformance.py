"""The conformance suite against the s3 backend on a real S3 server (moto).

The fault category really stops the server (scripts/services/stop.sh) and starts it again; the
server keeps no state, so the bucket is created again after the restart.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from hicache_storage_conformance import BackendConformance
from s3_support import SERVICES, control, s3_options, settings

BUCKET = f"hc-conf-{secrets.token_hex(4)}"


def ensure_bucket() -> dict[str, str]:
    env = settings()
    SERVICES.s3_bucket(BUCKET, env, exist_ok=True)
    return env


class TestS3Conformance(BackendConformance):
    backend = "s3"

    def backend_options(self, tmp_path: Path) -> dict[str, Any]:
        control("start", "s3")
        env = ensure_bucket()
        return {**s3_options(env, BUCKET), "prefix": f"conf{secrets.token_hex(4)}"}

    def stop_server(self, backend: Any) -> None:
        control("stop", "s3")

    def start_server(self, backend: Any) -> None:
        control("start", "s3")
        ensure_bucket()
