"""The servers of a pytest-xdist worker: every port moved by the worker's number, a state directory of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hicache_storage.testing.services import TestServices
from hicache_storage.testing.workers import (
    ENV_FILE,
    MAX_WORKERS,
    PORT_STRIDE,
    use_worker_servers,
    worker_environment,
    worker_number,
)

REPO = Path(__file__).resolve().parents[2]


def services(tmp_path: Path, **env: str) -> TestServices:
    return TestServices(REPO, {"PATH": "/usr/bin:/bin", "HICACHE_SERVICES_DIR": str(tmp_path), **env})


def test_worker_number() -> None:
    assert worker_number("gw0") == 0
    assert worker_number("gw12") == 12
    assert worker_number(None) is None
    assert worker_number("master") is None


def test_worker_zero_uses_the_checkout_settings(tmp_path: Path) -> None:
    own = services(tmp_path)
    assert worker_environment(own, 0) == own.settings()


def test_other_workers_move_every_port_and_the_urls_follow(tmp_path: Path) -> None:
    settings = worker_environment(services(tmp_path, HICACHE_TEST_REDIS_PORT="26379"), 3)
    shift = 3 * PORT_STRIDE
    assert settings["HICACHE_TEST_REDIS_PORT"] == str(26379 + shift)
    assert settings["HICACHE_TEST_REDIS_URL"] == f"redis://127.0.0.1:{26379 + shift}/0"
    assert settings["HICACHE_TEST_REDIS_CLUSTER_PORTS"] == " ".join(str(p + shift) for p in (17001, 17002, 17003))
    assert settings["HICACHE_TEST_REDIS_CLUSTER_NODES"].split(",")[0] == f"127.0.0.1:{17001 + shift}"
    assert settings["HICACHE_TEST_S3_ENDPOINT"] == f"http://127.0.0.1:{15000 + shift}"
    assert settings["HICACHE_TEST_MOONCAKE_MASTER"] == f"127.0.0.1:{15551 + shift}"
    assert settings["HICACHE_TEST_MOONCAKE_METADATA"] == f"http://127.0.0.1:{15552 + shift}/metadata"
    assert settings["HICACHE_TEST_MOONCAKE_CLIENT_PORT"] == str(15554 + shift)
    assert settings["HICACHE_SERVICES_DIR"] == str(tmp_path / "xdist" / "gw3")


def test_no_two_workers_share_a_port(tmp_path: Path) -> None:
    seen: dict[int, int] = {}
    for number in range(MAX_WORKERS):
        settings = worker_environment(services(tmp_path), number)
        ports = [
            int(p)
            for key, value in settings.items()
            if key.startswith("HICACHE_TEST_") and key.endswith(("_PORT", "_PORTS"))
            for p in value.split()
        ]
        bus = [int(p) + 10000 for p in settings["HICACHE_TEST_REDIS_CLUSTER_PORTS"].split()]
        low, high = int(settings["MC_MIN_RPC_PORT"]), int(settings["MC_MAX_RPC_PORT"])
        for port in ports + bus:
            assert seen.setdefault(port, number) == number, f"port {port}: workers {seen[port]} and {number}"
            assert not low <= port <= high, f"port {port} of worker {number} is in the Mooncake clients' port range"


def test_too_many_workers_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"workers 0..{MAX_WORKERS - 1}"):
        worker_environment(services(tmp_path), MAX_WORKERS)


def test_use_worker_servers_sets_the_environment_and_writes_it_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("HICACHE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HICACHE_SERVICES_DIR", str(tmp_path))
    settings = use_worker_servers(TestServices(REPO), 2)
    assert os.environ["HICACHE_TEST_S3_PORT"] == str(15000 + 2 * PORT_STRIDE) == settings["HICACHE_TEST_S3_PORT"]
    written = (tmp_path / "xdist" / "gw2" / ENV_FILE).read_text()
    assert f"export HICACHE_TEST_S3_PORT='{15000 + 2 * PORT_STRIDE}'" in written.splitlines()
