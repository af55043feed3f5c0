"""``health`` and ``metrics``: exit status 0 / 1 / 2 as documented, one line for bad input, and a probe
that leaves nothing behind on any backend."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from operate_support import LISTING, cli, fill, options_for, store_contents
from prometheus_client.parser import text_string_to_metric_families

from hicache_storage import testing as kit
from hicache_storage.metrics import prometheus_text


@pytest.fixture(params=LISTING)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return request.param, options_for(request.param, tmp_path)


@pytest.mark.parametrize("command", ["health", "metrics"])
def test_the_probe_leaves_nothing_behind(store: tuple[str, dict[str, Any]], command: str, capsys: Any) -> None:
    name, options = store
    empty = store_contents(name, options)
    assert cli(command, name, "--config", json.dumps(options)) == 0
    assert store_contents(name, options) == empty  # an empty store stays empty: no page, directory or key
    fill(name, options)
    before = store_contents(name, options)
    assert cli(command, name, "--config", json.dumps({**options, "manifests": True})) == 0
    assert store_contents(name, options) == before
    capsys.readouterr()


def test_health_is_zero_when_healthy_and_one_when_a_step_fails(tmp_path: Path, capsys: Any) -> None:
    assert cli("health", "file", "--config", json.dumps(options_for("file", tmp_path)), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] and set(report["steps"]) == {"set", "exists", "get", "delete"}
    down = {"store": "health-down", "fail_set_rate": 1.0}
    assert cli("health", "sim", "--config", json.dumps(down)) == 1
    assert "unhealthy" in capsys.readouterr().out


def test_a_backend_that_cannot_delete_gets_a_probe_that_writes_nothing(tmp_path: Path, capsys: Any) -> None:
    options = {**options_for("file", tmp_path), "read_only": True}
    assert cli("health", "file", "--config", json.dumps(options), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] and set(report["steps"]) == {"exists"}
    assert store_contents("file", options) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["health", "file", "--config", '{"path": "/tmp", "max_byte": 1}'], "did you mean max_bytes?"),
        (["health", "file", "--config", '{"path": "/tmp", "fanout_levels": 9}'], "extra_config.fanout_levels"),
        (["health", "nosuch"], "no backend named 'nosuch'"),
        (["health", "sim", "--timeout", "-1"], "--timeout: expected a positive number, got -1"),
        (["health", "sim", "--timeout", "0"], "--timeout: expected a positive number, got 0"),
        (["metrics", "sim", "--timeout", "nan"], "--timeout: expected a positive number"),
        (["health", "sim", "--config", "{"], "--config: not valid JSON"),
    ],
)
def test_bad_input_is_exit_status_two_and_one_line(capsys: Any, args: list[str], message: str) -> None:
    assert cli(*args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_metrics_to_a_missing_directory_is_one_line(tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "no" / "such" / "hicache.prom"
    assert cli("metrics", "sim", "--textfile", str(target)) == 2
    err = capsys.readouterr().err
    assert f"--textfile: directory '{target.parent}' does not exist" in err
    assert len(err.strip().splitlines()) == 1 and not target.parent.exists()


def test_metrics_parse_with_the_prometheus_parser(tmp_path: Path) -> None:
    path = tmp_path / "hicache.prom"
    assert cli("metrics", "file", "--config", json.dumps(options_for("file", tmp_path)), "--textfile", str(path)) == 0
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    pages = {s.labels["op"]: s.value for s in families["hicache_storage_pages"].samples if s.name.endswith("_total")}
    assert pages == {"set": 1, "exists": 1, "get": 1, "delete": 1}  # the probe removes its page
    latency = families["hicache_storage_call_seconds"]
    buckets = [s for s in latency.samples if s.name.endswith("_bucket") and s.labels["op"] == "get"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 1


def test_metrics_render_breakers_and_events() -> None:
    from hicache_storage_sim import SimBackend

    storage = kit.make_backend(SimBackend, {"resilience": True}, kit.make_pool())
    storage.batch_set_v1(kit.random_keys(2), kit.page_indices(0, 2))
    storage.stats.bump("integrity_failures", 3)
    text = prometheus_text(storage.get_stats(), {"instance": 'rank "0"'})
    families = {f.name: f for f in text_string_to_metric_families(text)}
    events = {s.labels["event"]: s.value for s in families["hicache_storage_events"].samples}
    assert events["integrity_failures"] == 3
    assert any(s.labels.get("instance") == 'rank "0"' for s in families["hicache_storage_calls"].samples)
    assert "hicache_storage_breaker_state" in families


def test_health_of_a_server_that_is_down_fails_within_the_timeout(capsys: Any) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = json.dumps({"url": f"redis://127.0.0.1:{port}/0", "resilience": {"deadline_s": 1.0, "retries": 0}})
    begin = time.monotonic()
    assert cli("health", "redis", "--config", config, "--timeout", "5") == 1
    assert time.monotonic() - begin < 5.5
    assert "unhealthy" in capsys.readouterr().out
