"""Operator commands (usage, purge, health, metrics) against stores holding several key spaces."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hicache_storage import load_backend, make_config
from hicache_storage import testing as kit
from hicache_storage.cli.commands import run
from hicache_storage.cli.operate import parse_age, usage_of
from hicache_storage.listing import KeySpaceManifest
from hicache_storage.metrics import prometheus_text
from hicache_storage.plugin.page_format import HEADER_SIZE

SPACES = [("model-a", "r1", ""), ("model-b", "r1", ""), ("model-b", "r2", "tenant-x")]
SERVICES = kit.TestServices(Path(__file__).resolve().parents[2])


def options_for(name: str, tmp_path: Path) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    if name == "file":
        return {"path": str(tmp_path / "store")}
    if name == "redis":
        SERVICES.start("redis")
        env = SERVICES.settings()
        return {"url": env["HICACHE_TEST_REDIS_URL"], "key_prefix": f"operate-{tag}:"}
    if name == "s3":
        SERVICES.start("s3")
        env = SERVICES.settings()
        bucket = f"operate-{tag}"
        SERVICES.s3_bucket(bucket, env)
        return {
            "bucket": bucket,
            "endpoint_url": env["HICACHE_TEST_S3_ENDPOINT"],
            "region": env["HICACHE_TEST_S3_REGION"],
            "aws_access_key_id": env["HICACHE_TEST_S3_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["HICACHE_TEST_S3_SECRET_ACCESS_KEY"],
        }
    if name == "fsspec":
        return {"url": f"memory://operate-{tag}"}
    return {"store": f"operate-{tag}"}  # a named sim store: every instance sees it


@pytest.fixture(params=["file", "sim", "redis", "s3", "fsspec"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return request.param, options_for(request.param, tmp_path)


def fill(name: str, options: dict[str, Any]) -> dict[tuple[str, str, str], tuple[list[str], list[bytes]]]:
    """Three key spaces of 3, 4 and 5 pages; what each stored."""
    written = {}
    for count, (model, revision, namespace) in enumerate(SPACES, start=3):
        pool = kit.make_pool(seed=count)
        extra = {**options, "model_revision": revision, "namespace": namespace}
        with load_backend(name, make_config(model, extra_config=extra)) as storage:
            storage.register_mem_pool_host(pool)
            keys = kit.random_keys(count)
            assert storage.batch_set_v1(keys, kit.page_indices(0, count)) == [True] * count
            written[(model, revision, namespace)] = (keys, [kit.page_bytes(pool, p) for p in range(count)])
    return written


def read_back(name: str, options: dict[str, Any], space: tuple[str, str, str], keys: list[str]) -> list[bytes | None]:
    model, revision, namespace = space
    pool = kit.make_pool(seed=None)
    extra = {**options, "model_revision": revision, "namespace": namespace}
    with load_backend(name, make_config(model, extra_config=extra)) as storage:
        storage.register_mem_pool_host(pool)
        hits = storage.batch_get_v1(keys, kit.page_indices(0, len(keys)))
    return [kit.page_bytes(pool, p) if hit else None for p, hit in enumerate(hits)]


def cli(*args: str) -> int:
    return run(list(args))


def test_usage_names_each_key_space_with_its_counts(store: tuple[str, dict[str, Any]], capsys: Any) -> None:
    name, options = store
    written = fill(name, options)
    assert cli("usage", name, "--config", json.dumps(options), "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    found = {(r["model"], r["revision"], r["namespace"]): r for r in rows}
    assert set(found) == set(written)
    for space, (keys, pages) in written.items():
        row = found[space]
        assert row["pages"] == len(keys)
        assert row["bytes"] == sum(len(page) + HEADER_SIZE for page in pages)  # page + record header
        assert row["pool"] == "kv" and row["ranks"] == ["tp0of1.pp0of1.cp0of1"]
        assert row["first_write"] <= row["last_write"]


def test_purge_by_model_removes_exactly_one_key_space(store: tuple[str, dict[str, Any]], capsys: Any) -> None:
    name, options = store
    written = fill(name, options)
    config = json.dumps(options)
    assert cli("purge", name, "--config", config, "--model", "model-a", "--dry-run") == 0
    assert "4 records would be removed; nothing was removed" in capsys.readouterr().out
    for space, (keys, pages) in written.items():  # a dry run removes nothing
        assert read_back(name, options, space, keys) == pages
    assert cli("purge", name, "--config", config, "--model", "model-a", "--yes") == 0
    assert "removed 4 of 4 records" in capsys.readouterr().out  # 3 pages + the manifest
    for space, (keys, pages) in written.items():
        expected = [None] * len(keys) if space[0] == "model-a" else pages
        assert read_back(name, options, space, keys) == expected
    assert cli("purge", name, "--config", config, "--model", "model-b", "--revision", "r2", "--yes") == 0
    left = {
        (r.manifest.model_name, r.manifest.model_revision)
        for r in usage_of(load_backend(name, make_config("x", extra_config=options)))
        if r.manifest
    }
    assert left == {("model-b", "r1")}


def test_purge_by_namespace_and_by_age(store: tuple[str, dict[str, Any]]) -> None:
    name, options = store
    written = fill(name, options)
    config = json.dumps(options)
    assert cli("purge", name, "--config", config, "--namespace", "tenant-x", "--yes") == 0
    assert read_back(name, options, SPACES[2], written[SPACES[2]][0]) == [None] * 5
    assert read_back(name, options, SPACES[1], written[SPACES[1]][0]) == written[SPACES[1]][1]
    assert cli("purge", name, "--config", config, "--older-than", "1d", "--yes") == 0  # nothing is that old
    assert read_back(name, options, SPACES[0], written[SPACES[0]][0]) == written[SPACES[0]][1]


def test_purge_needs_one_filter_and_asks_first(tmp_path: Path, capsys: Any) -> None:
    config = json.dumps(options_for("file", tmp_path))
    assert cli("purge", "file", "--config", config) == 2
    assert "exactly one of" in capsys.readouterr().err
    fill("file", options_for("file", tmp_path))
    assert cli("purge", "file", "--config", config, "--model", "model-a") == 2  # no terminal, no --yes
    assert "--yes" in capsys.readouterr().err


def test_ages() -> None:
    assert parse_age("90s") == 90 and parse_age("12h") == 43200 and parse_age("1.5d") == 129600
    with pytest.raises(ValueError, match=r"e\.g\. 1d"):
        parse_age("yesterday")


def test_manifest_round_trips_and_rejects_garbage() -> None:
    manifest = KeySpaceManifest(
        "hc1-" + "0" * 20 + ".", "m", "r", "n", "kv", "bfloat16", "page_first", 4, 512, False, "tp0of1", 1.0, 2.0
    )
    assert KeySpaceManifest.from_bytes(manifest.to_bytes()) == manifest
    assert len(manifest.to_bytes()) == 4096
    assert KeySpaceManifest.from_bytes(b"\x00" * 4096) is None
    assert KeySpaceManifest.from_bytes(b'{"prefix": 1}'.ljust(4096)) is None


def test_listing_pages_through_a_cursor(tmp_path: Path) -> None:
    options = options_for("file", tmp_path)
    fill("file", options)
    with load_backend("file", make_config("x", extra_config=options)) as storage:
        seen: list[str] = []
        cursor = None
        while True:
            listing = storage.list_pages(limit=2, cursor=cursor)
            assert len(listing.pages) <= 2
            seen += [p.key for p in listing.pages]
            cursor = listing.cursor
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 3 + 4 + 5 + 3  # pages and one manifest per key space
        with pytest.raises(ValueError, match="key-space prefix"):
            storage.list_pages("../etc")


def test_health_is_zero_when_healthy_and_nonzero_within_the_timeout_when_down(tmp_path: Path, capsys: Any) -> None:
    assert cli("health", "file", "--config", json.dumps(options_for("file", tmp_path)), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["healthy"] and set(report["steps"]) == {"set", "exists", "get"}
    down = {"store": "health-down", "fail_set_rate": 1.0}
    assert cli("health", "sim", "--config", json.dumps(down)) == 1
    assert "unhealthy" in capsys.readouterr().out


def test_metrics_parse_with_the_prometheus_parser(tmp_path: Path, capsys: Any) -> None:
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


def test_age_purges_skip_pinned_key_spaces(tmp_path: Path) -> None:
    options = options_for("sim", tmp_path)
    pool = kit.make_pool()
    keys = {}
    for model, pinned in (("system-prompts", True), ("chat", False)):
        with load_backend("sim", make_config(model, extra_config={**options, "pinned": pinned})) as storage:
            storage.register_mem_pool_host(pool)
            keys[model] = kit.random_keys(2)
            storage.batch_set_v1(keys[model], kit.page_indices(0, 2))
    assert cli("purge", "sim", "--config", json.dumps(options), "--older-than", "0s", "--yes") == 0
    left = {
        r.manifest.model_name
        for r in usage_of(load_backend("sim", make_config("x", extra_config=options)))
        if r.manifest
    }
    assert left == {"system-prompts"}


def test_health_of_a_server_that_is_down_fails_within_the_timeout(capsys: Any) -> None:
    import socket
    import time

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = json.dumps({"url": f"redis://127.0.0.1:{port}/0", "resilience": {"deadline_s": 1.0, "retries": 0}})
    begin = time.monotonic()
    assert cli("health", "redis", "--config", config, "--timeout", "5") == 1
    assert time.monotonic() - begin < 5.5
    assert "unhealthy" in capsys.readouterr().out
