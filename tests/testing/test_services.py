"""TestServices: settings read once per environment, and a start of servers already up skips the script."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_storage.testing.services import TestServices, unit_ports

REPO = Path(__file__).resolve().parents[2]
FAKE_CTL = """#!/usr/bin/env bash
echo "$*" >> "$HICACHE_SERVICES_DIR/calls"
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket accepting connections on a free loopback port (the "server")."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def fake_checkout(tmp_path: Path) -> Path:
    """A checkout whose ctl.sh only records its arguments (env.sh is the real one)."""
    scripts = tmp_path / "checkout" / "scripts" / "services"
    scripts.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "services" / "env.sh", scripts / "env.sh")
    (scripts / "ctl.sh").write_text(FAKE_CTL)
    return tmp_path / "checkout"


def services_on(tmp_path: Path, redis_port: int) -> TestServices:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "HICACHE_SERVICES_DIR": str(state), "HICACHE_TEST_REDIS_PORT": str(redis_port)}
    return TestServices(fake_checkout(tmp_path), env)


def calls(services: TestServices) -> list[str]:
    path = Path(services.settings()["HICACHE_SERVICES_DIR"]) / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_start_of_running_servers_skips_the_script(tmp_path: Path, listener: socket.socket) -> None:
    services = services_on(tmp_path, listener.getsockname()[1])
    services.start("redis")
    services.start("redis")
    assert calls(services) == ["start redis"]
    services.start("s3")  # not started by this process yet
    assert calls(services) == ["start redis", "start s3"]


def test_any_other_action_forgets_what_was_started(tmp_path: Path, listener: socket.socket) -> None:
    services = services_on(tmp_path, listener.getsockname()[1])
    services.start("redis")
    services.run("kill", "mooncake-master")
    services.start("redis")
    assert calls(services) == ["start redis", "kill mooncake-master", "start redis"]


def test_a_closed_port_sends_the_start_through_the_script(tmp_path: Path, listener: socket.socket) -> None:
    services = services_on(tmp_path, listener.getsockname()[1])
    services.start("redis")
    listener.close()  # stopped behind this process's back
    services.start("redis")
    assert calls(services) == ["start redis", "start redis"]


def test_start_of_all_covers_each_service(tmp_path: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    services = services_on(tmp_path, port)
    services.start()
    assert calls(services) == ["start"]
    services.start("redis")  # its port is open: nothing to do
    assert calls(services) == ["start"]


def test_unit_ports() -> None:
    settings = TestServices(REPO, {"PATH": "/usr/bin:/bin"}).settings()
    assert unit_ports(settings, "redis") == [16379]
    assert unit_ports(settings, "redis-cluster") == [17001, 17002, 17003]
    assert unit_ports(settings, "redis-cluster-2") == [17002]
    assert unit_ports(settings, "redis-cluster-4") is None
    assert unit_ports(settings, "mooncake") == [15551, 15554]
    assert unit_ports(settings, "all") == [16379, 17001, 17002, 17003, 15000, 15551, 15554]
    assert unit_ports(settings, "nonsense") is None


def test_settings_are_a_fresh_copy_each_time() -> None:
    services = TestServices(REPO, {"PATH": "/usr/bin:/bin"})
    first = services.settings()
    first["HICACHE_TEST_REDIS_PORT"] = "1"
    assert services.settings()["HICACHE_TEST_REDIS_PORT"] == "16379"
