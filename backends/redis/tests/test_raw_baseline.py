"""The raw baseline the redis backend offers to ``hicache-storage bench``, against real servers."""

from __future__ import annotations

import os
import secrets
from typing import Any

import pytest
import redis
from hicache_storage_redis import RedisBackend
from hicache_storage_redis.raw_baseline import RawRedis

from hicache_storage import make_config
from hicache_storage.cli.bench import run_bench
from hicache_storage.plugin import raw_baseline_for
from hicache_storage.testing import check_raw_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["standalone", "cluster"])
def options(request: pytest.FixtureRequest) -> dict[str, Any]:
    prefix = f"t{secrets.token_hex(4)}:"
    if request.param == "standalone":
        return {"url": request.getfixturevalue("redis_url"), "key_prefix": prefix}
    return {"cluster": True, "nodes": request.getfixturevalue("cluster_nodes"), "key_prefix": prefix}


def raw_redis(options: dict[str, Any]) -> RawRedis:
    """The raw baseline ``hicache-storage bench`` builds for the redis backend with ``options``."""
    raw = raw_baseline_for(RedisBackend, make_config(extra_config=options))
    assert isinstance(raw, RawRedis)
    return raw


def pages(count: int, size: int) -> list[memoryview]:
    return [memoryview(bytearray(os.urandom(size))) for _ in range(count)]


def test_round_trip_exists_and_close(options: dict[str, Any]) -> None:
    raw = raw_redis(options)
    try:
        keys, _data = check_raw_client(raw)
        stored = list(raw.client.scan_iter(match=f"{options['key_prefix']}*"))
        assert sorted(stored) == sorted(f"{options['key_prefix']}raw-baseline/{key}".encode() for key in keys)
    finally:
        raw.close()
    check = raw_redis(options)
    try:
        assert check.exists(keys) == [False] * 5
    finally:
        check.close()


def test_ttl_applies_to_raw_writes(redis_url: str) -> None:
    raw = raw_redis({"url": redis_url, "key_prefix": "t-ttl:", "ttl_s": 60})
    try:
        raw.set(["k"], pages(1, 64))
        assert 0 < raw.client.pttl(raw.key("k")) <= 60_000
    finally:
        raw.close()


def test_bench_reports_ratios_against_redis_py(options: dict[str, Any]) -> None:
    result = run_bench("redis", options, page_bytes=8192, pages=16, batch=8)
    try:
        assert result["byte_exact"]
        assert result["raw"] is not None
        assert result["raw"]["get"]["ok"] == 16
        assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
        print("redis" + (" cluster" if options.get("cluster") else ""), result["ratio_ours_over_raw"])
    finally:
        raw = raw_redis(options)
        leftover = list(raw.client.scan_iter(match=f"{options['key_prefix']}*"))
        for key in leftover:
            raw.client.delete(key)
        raw.close()
    assert leftover == []  # neither the baseline's nor the backend's pages remain


def test_server_down_raises_from_the_raw_client() -> None:
    raw = raw_redis({"url": "redis://127.0.0.1:1/0", "socket_timeout_s": 0.5})
    try:
        with pytest.raises(redis.ConnectionError):
            raw.exists(["k"])
    finally:
        raw.close()
