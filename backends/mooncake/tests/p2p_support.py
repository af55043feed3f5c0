"""A private ``mooncake_master`` (and segment holders) on free ports, for metadata modes the shared services lack.

The master of ``scripts/services`` runs an HTTP metadata server and an HTTP-mode segment holder, whose
memory P2PHANDSHAKE clients cannot reach; tests of that mode start a master of their own here.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from mooncake_support import store_options

HOST = "127.0.0.1"
P2P = "P2PHANDSHAKE"
#: How long a process gets to become ready (the master takes about 1 s).
READY_S = 30.0
_BIN = Path(sys.executable).parent
_SEGMENT = re.compile(r'^segment_(allocated|total_capacity)_bytes\{segment="([^"]+)"\} (\d+)', re.MULTILINE)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for now)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Child:
    """A spawned server with its output in ``log``; stopped (TERM, then KILL) by :meth:`stop`."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._out: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self._out, stderr=subprocess.STDOUT, cwd=log.parent, env={**os.environ, **(env or {})}
        )

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Poll ``ready`` until it holds; :class:`RuntimeError` with the log's tail after ``READY_S`` or an exit."""
        deadline = time.monotonic() + READY_S
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                state = "exited" if self.proc.poll() is not None else f"not ready after {READY_S} s"
                raise RuntimeError(f"{what}: {state}; {self.log}:\n{self.tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()


class PrivateMaster:
    """``mooncake_master`` on free ports under ``workdir``: with an HTTP metadata server only if ``http_metadata``."""

    def __init__(self, workdir: Path, http_metadata: bool = False) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.rpc_port, self.metrics_port = free_port(), free_port()
        argv = [
            str(_BIN / "mooncake_master"),
            f"--rpc_address={HOST}",
            f"--rpc_port={self.rpc_port}",
            f"--metrics_host={HOST}",
            f"--metrics_port={self.metrics_port}",
            "--rpc_thread_num=4",
            "--enable_metric_reporting=false",
            "--logtostderr=true",
        ]
        self.metadata = P2P
        if http_metadata:
            http_port = free_port()
            self.metadata = f"http://{HOST}:{http_port}/metadata"
            argv += [
                "--enable_http_metadata_server=true",
                f"--http_metadata_server_host={HOST}",
                f"--http_metadata_server_port={http_port}",
            ]
        self.holders: list[Child] = []
        self.child = Child(argv, workdir / "master.log")
        try:
            self.child.wait_for(lambda: '"service_ready":true' in self._get("/health"), "mooncake_master")
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return f"{HOST}:{self.rpc_port}"

    def _get(self, path: str) -> str:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{self.metrics_port}{path}", timeout=2) as reply:
                return str(reply.read().decode())
        except OSError:
            return ""

    def segments(self) -> dict[str, tuple[int, int]]:
        """Mounted segments: name → (allocated bytes, capacity bytes), from the master's metrics."""
        found: dict[str, dict[str, int]] = {}
        for kind, name, value in _SEGMENT.findall(self._get("/metrics")):
            found.setdefault(name, {})[kind] = int(value)
        return {name: (v.get("allocated", 0), v.get("total_capacity", 0)) for name, v in found.items()}

    def capacity(self) -> int:
        return sum(capacity for _, capacity in self.segments().values())

    def start_holder(self, size: int, metadata: str | None = None) -> Child:
        """A ``mooncake_client`` lending ``size`` bytes (in this master's mode unless ``metadata`` is given)."""
        before = self.capacity()
        port = free_port()
        argv = [
            str(_BIN / "mooncake_client"),
            f"--host={HOST}",
            f"--port={port}",
            f"--metadata_server={metadata or self.metadata}",
            f"--master_server_address={self.address}",
            f"--global_segment_size={size}",
            "--protocol=tcp",
            "--logtostderr=true",
        ]
        env = {"MC_TCP_BIND_ADDRESS": HOST, "MC_STORE_CLIENT_SETUP_RETRIES": "3"}
        holder = Child(argv, self.workdir / f"holder-{port}.log", env)
        self.holders.append(holder)
        holder.wait_for(lambda: self.capacity() >= before + size, "mooncake_client (segment holder)")
        return holder

    def options(self, **extra: Any) -> dict[str, Any]:
        """Backend options for a client of this master (this master's mode, no segment, fresh key prefix)."""
        return store_options(self.address, self.metadata, **extra)

    def close(self) -> None:
        for child in [*self.holders, self.child]:
            child.stop()
