"""Test servers of one pytest-xdist worker: ports and a state directory of its own.

A test may stop, kill or restart the server it uses (the outage checks). With each worker on
servers of its own, such an outage reaches no test on another worker, and the keys and buckets of
two workers never meet. Worker ``gw0`` uses the checkout's settings as they are (the servers
``scripts/test.sh`` starts, the same as a run without xdist); worker ``gwN`` adds
``N * PORT_STRIDE`` to every port and keeps its state (pidfiles, logs) under
``<HICACHE_SERVICES_DIR>/xdist/gwN``. The servers start when a test first asks for them, through
the same ``scripts/services`` scripts; :func:`stop_worker_servers` stops them at the end.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from .services import TestServices

__all__ = [
    "MAX_WORKERS",
    "PORT_STRIDE",
    "stop_worker_servers",
    "use_worker_servers",
    "worker_environment",
    "worker_number",
]

#: How far apart the ports of two workers are (each service uses fewer consecutive ports).
PORT_STRIDE = 10
#: Workers with servers of their own (with the default ports, the S3 ports of worker 55 would be mooncake's).
MAX_WORKERS = 40
#: The variables holding ports (the cluster's is a space-separated list).
PORT_VARIABLES = (
    "HICACHE_TEST_REDIS_PORT",
    "HICACHE_TEST_REDIS_CLUSTER_PORTS",
    "HICACHE_TEST_S3_PORT",
    "HICACHE_TEST_MOONCAKE_RPC_PORT",
    "HICACHE_TEST_MOONCAKE_HTTP_PORT",
    "HICACHE_TEST_MOONCAKE_METRICS_PORT",
    "HICACHE_TEST_MOONCAKE_CLIENT_PORT",
)
#: The variables ``env.sh`` builds from the ports: dropped, so that it builds them again.
DERIVED_VARIABLES = (
    "HICACHE_TEST_REDIS_URL",
    "HICACHE_TEST_REDIS_CLUSTER_NODES",
    "HICACHE_TEST_REDIS_CLUSTER_URL",
    "HICACHE_TEST_S3_ENDPOINT",
    "HICACHE_TEST_MOONCAKE_MASTER",
    "HICACHE_TEST_MOONCAKE_METADATA",
)
#: Written into a worker's state directory: its settings as ``export NAME='value'`` lines, so a
#: shell can stop what the worker left running (``scripts/test.sh`` does, whatever happened).
ENV_FILE = "worker.env"


def worker_number(name: str | None) -> int | None:
    """The number of xdist worker ``name`` (``"gw3"`` → 3); ``None`` outside a worker."""
    match = re.fullmatch(r"gw(\d+)", name or "")
    return int(match.group(1)) if match else None


def worker_environment(services: TestServices, number: int) -> dict[str, str]:
    """The settings (``HICACHE_*``) of worker ``number``'s servers: every port moved, a state directory of its own.

    Worker 0 gets ``services.settings()`` unchanged. Raises :class:`ValueError` for a number at or
    over :data:`MAX_WORKERS`.
    """
    base = services.settings()
    if number == 0:
        return base
    if not 0 < number < MAX_WORKERS:
        raise ValueError(f"xdist worker number {number}: servers of their own for workers 0..{MAX_WORKERS - 1} only")
    offset = number * PORT_STRIDE
    env = {k: v for k, v in services._env().items() if k not in DERIVED_VARIABLES}
    env.update({k: v for k, v in base.items() if k not in DERIVED_VARIABLES})
    for name in PORT_VARIABLES:
        env[name] = " ".join(str(int(port) + offset) for port in base[name].split())
    env["HICACHE_SERVICES_DIR"] = str(Path(base["HICACHE_SERVICES_DIR"]) / "xdist" / f"gw{number}")
    return TestServices(services.root, env).settings()


def use_worker_servers(services: TestServices, number: int) -> Mapping[str, str]:
    """Point this process (its environment) at worker ``number``'s servers; returns their settings.

    Also writes them to ``<state directory>/worker.env`` (see :data:`ENV_FILE`).
    """
    settings = worker_environment(services, number)
    os.environ.update(settings)
    if number:
        state = Path(settings["HICACHE_SERVICES_DIR"])
        state.mkdir(parents=True, exist_ok=True)
        lines = [f"export {name}='{value}'" for name, value in sorted(settings.items())]
        (state / ENV_FILE).write_text("\n".join(lines) + "\n")
    return settings


def stop_worker_servers(services: TestServices) -> None:
    """Stop every server of the state directory ``services`` points at (the master first: no unmount wait)."""
    services.run("kill", "mooncake-master")
    services.run("stop", "all")
