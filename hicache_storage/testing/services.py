"""Control of a source checkout's local test servers (``scripts/services``) and clients of them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["TestServices", "s3_backend_options", "s3_client"]


def s3_backend_options(settings: Mapping[str, str], bucket: str) -> dict[str, Any]:
    """Options of the ``s3`` backend for ``bucket`` on the test S3 server that ``settings`` describe."""
    return {
        "bucket": bucket,
        "endpoint_url": settings["HICACHE_TEST_S3_ENDPOINT"],
        "region": settings["HICACHE_TEST_S3_REGION"],
        "aws_access_key_id": settings["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        "aws_secret_access_key": settings["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
    }


def s3_client(settings: Mapping[str, str]) -> Any:
    """A boto3 client of the test S3 server that ``settings`` (:meth:`TestServices.settings`) describe."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=settings["HICACHE_TEST_S3_ENDPOINT"],
        region_name=settings["HICACHE_TEST_S3_REGION"],
        aws_access_key_id=settings["HICACHE_TEST_S3_ACCESS_KEY_ID"],
        aws_secret_access_key=settings["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
    )


class TestServices:
    """The local test servers of a source checkout, through its ``scripts/services`` scripts.

    ``root`` is the checkout's root directory. ``env`` is the environment of the scripts (``None``:
    this process's environment at the time of each call); ``timeout_s`` bounds each script run.
    """

    __test__ = False  # not a test class, whatever its name says

    def __init__(self, root: str | Path, env: Mapping[str, str] | None = None, timeout_s: float = 180.0) -> None:
        self.root = Path(root)
        self.scripts = self.root / "scripts" / "services"
        self.env = None if env is None else dict(env)
        self.timeout_s = timeout_s

    def _env(self) -> dict[str, str]:
        return dict(os.environ) if self.env is None else self.env

    def settings(self) -> dict[str, str]:
        """The ``HICACHE_TEST_*`` connection settings (the environment overrides ``env.sh``'s defaults)."""
        out = subprocess.run(
            ["bash", str(self.scripts / "env.sh"), "--json"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            env=self._env(),
        )
        settings: dict[str, str] = json.loads(out.stdout)
        return settings

    def run(self, action: str, *names: str, attempts: int = 1, pause_s: float = 0.0) -> float:
        """``ctl.sh ACTION NAME...``, tried up to ``attempts`` times (``pause_s`` apart); seconds taken.

        Raises :class:`RuntimeError` with the script's output when the last attempt fails.
        """
        begin = time.monotonic()
        for attempt in range(attempts):
            done = subprocess.run(
                ["bash", str(self.scripts / "ctl.sh"), action, *names],
                check=False,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self._env(),
            )
            if done.returncode == 0:
                break
            if attempt == attempts - 1:
                raise RuntimeError(f"ctl.sh {action} {' '.join(names)} failed:\n{done.stdout}\n{done.stderr}")
            time.sleep(pause_s)
        return time.monotonic() - begin

    def control(self, action: str, *names: str, attempts: int = 3) -> None:
        """``start.sh``/``stop.sh`` NAME...; a failed start is tried again (up to ``attempts`` times)."""
        self.run(action, *names, attempts=attempts if action == "start" else 1)

    def start(self, *names: str, attempts: int = 3) -> None:
        """Start ``names`` (none = all) and wait until they are ready; idempotent."""
        self.control("start", *names, attempts=attempts)

    def stop(self, *names: str) -> None:
        """Stop ``names`` (none = all); idempotent."""
        self.control("stop", *names)

    def s3_bucket(self, name: str, settings: Mapping[str, str] | None = None, *, exist_ok: bool = False) -> None:
        """Create bucket ``name`` on the (running) test S3 server; ``exist_ok``: ignore any failure to.

        The server keeps no state across restarts: create the bucket again after starting it.
        """
        client = s3_client(self.settings() if settings is None else settings)
        try:
            client.create_bucket(Bucket=name)
        except Exception:
            if not exist_ok:
                raise
