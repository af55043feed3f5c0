"""Control of a source checkout's local test servers (``scripts/services``) and clients of them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["TestServices", "s3_backend_options", "s3_client", "unit_ports"]

#: Settings read so far, by the environment that produced them (``env.sh`` runs once per environment).
_SETTINGS: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
#: Service names this process started, by state directory; any other action through this module
#: forgets them all, so the next start runs the script again (see :meth:`TestServices.run`).
_STARTED: dict[str, set[str]] = {}
_LOCK = threading.Lock()
_SERVICES = ("all", "redis", "redis-cluster", "s3", "mooncake")


def unit_ports(settings: Mapping[str, str], name: str) -> list[int] | None:
    """The ports the servers of ``name`` (``ctl.sh`` service or unit name) listen on; ``None``: unknown name."""
    cluster = [int(p) for p in settings["HICACHE_TEST_REDIS_CLUSTER_PORTS"].split()]
    master = [int(settings["HICACHE_TEST_MOONCAKE_RPC_PORT"])]
    holder = settings["HICACHE_TEST_MOONCAKE_SEGMENT_SIZE"] != "0"
    segment = [int(settings["HICACHE_TEST_MOONCAKE_CLIENT_PORT"])] if holder else []
    known = {
        "redis": [int(settings["HICACHE_TEST_REDIS_PORT"])],
        "redis-cluster": cluster,
        "s3": [int(settings["HICACHE_TEST_S3_PORT"])],
        "mooncake": master + segment,
        "mooncake-master": master,
        "mooncake-segment": segment,
    }
    known["all"] = [port for key in ("redis", "redis-cluster", "s3", "mooncake") for port in known[key]]
    if name.startswith("redis-cluster-") and name[len("redis-cluster-") :].isdigit():
        index = int(name[len("redis-cluster-") :])
        return cluster[index - 1 : index] or None
    return known.get(name)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


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
        """The ``HICACHE_TEST_*`` connection settings (the environment overrides ``env.sh``'s defaults).

        Read once per environment (the ``HICACHE_*`` variables and the checkout); a fresh copy each call.
        """
        env = self._env()
        key = (("", str(self.scripts)), *sorted((k, v) for k, v in env.items() if k.startswith("HICACHE_")))
        with _LOCK:
            cached = _SETTINGS.get(key)
        if cached is None:
            out = subprocess.run(
                ["bash", str(self.scripts / "env.sh"), "--json"],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
                env=env,
            )
            cached = json.loads(out.stdout)
            with _LOCK:
                _SETTINGS[key] = cached
        return dict(cached)

    def _already_started(self, settings: Mapping[str, str], names: tuple[str, ...]) -> bool:
        """Whether this process started ``names`` (none = all) and nothing stopped them since.

        Only this module's own calls are remembered; a port that no longer accepts connections (a
        server stopped from elsewhere) sends the start through the script again.
        """
        wanted = names or ("all",)
        with _LOCK:
            started = set(_STARTED.get(settings["HICACHE_SERVICES_DIR"], ()))
        if not set(wanted) <= started:
            return False
        for name in wanted:
            ports = unit_ports(settings, name)
            if ports is None or not all(_listening(settings["HICACHE_TEST_HOST"], port) for port in ports):
                return False
        return True

    def run(self, action: str, *names: str, attempts: int = 1, pause_s: float = 0.0) -> float:
        """``ctl.sh ACTION NAME...``, tried up to ``attempts`` times (``pause_s`` apart); seconds taken.

        A ``start`` of servers that an earlier ``start`` of this process brought up, with no other
        action since and every port still accepting connections, returns at once without the script
        (each test asks for its servers; the script's readiness checks take a second or so).
        Raises :class:`RuntimeError` with the script's output when the last attempt fails.
        """
        begin = time.monotonic()
        settings = self.settings()
        state = settings["HICACHE_SERVICES_DIR"]
        if action == "start" and self._already_started(settings, names):
            return time.monotonic() - begin
        if action != "start":
            with _LOCK:
                _STARTED.pop(state, None)
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
                if action in ("start", "restart"):
                    with _LOCK:
                        _STARTED.setdefault(state, set()).update(_SERVICES if "all" in names or not names else names)
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
