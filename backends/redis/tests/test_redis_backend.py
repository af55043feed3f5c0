"""Tests of what is the redis backend's own, against real servers on 127.0.0.1: its record and wire
format, options, key prefixes, cluster routing, AUTH, ACL and maxmemory replies.

Round trips, batches, damage, delete, clear, bad input and outages are the conformance suite's
(test_redis_conformance.py)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import torch
from hicache_storage_redis import RedisBackend
from redis_support import raw_store

from hicache_storage import ConfigError, HiCacheStorage, HostKVPool, make_config
from hicache_storage.plugin.page_format import encode_record
from hicache_storage.testing import (
    FAST_RESILIENCE,
    PAGE_SIZE,
    make_backend,
    make_pool,
    page_bytes,
    page_indices,
    random_keys,
)
from hicache_storage.testing.fixtures import DAMAGES, check_damaged_page_is_a_counted_miss


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[dict[str, Any]]:
    """A private redis-server with a password and a 2 MiB maxmemory (LRU eviction)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (scripts/services/install.sh installs it)")
    port, password = free_port(), "pa55-word-xyz"
    args = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--requirepass",
        password,
        "--maxmemory",
        "2mb",
        "--maxmemory-policy",
        "allkeys-lru",
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, password=password, socket_timeout=1)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield {"port": port, "password": password}
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


# ----------------------------------------------------------------------------- wire format and options
def test_v0_and_v1_interoperate_and_pipelines_are_chunked(redis_url: str, open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend({"url": redis_url, "pipeline_pages": 3}, pool)
    keys = random_keys(7)
    values = [pool.get_data_page(p * PAGE_SIZE) for p in range(7)]
    assert backend.batch_set(keys, values) is True
    assert backend.batch_get_v1(keys, page_indices(8, 7)) == [True] * 7
    assert [page_bytes(pool, p) for p in range(8, 15)] == [bytes(v.view(torch.uint8).numpy()) for v in values]
    got = backend.batch_get(keys)
    assert [bytes(t.view(torch.uint8).numpy()) for t in got] == [bytes(v.view(torch.uint8).numpy()) for v in values]


@pytest.mark.parametrize("hash_ahead", [True, False], ids=["helper-thread", "sender-only"])
def test_every_record_header_is_right_with_or_without_the_hash_helper(
    redis_url: str, open_backend: Any, hash_ahead: bool
) -> None:
    """Both ways of computing write checksums store exactly ``encode_record`` of each page (128 KiB
    pages, 5 MiB per call: the socket fills, so the sender also hashes while it waits)."""
    pool = make_pool(num_pages=80, layout="page_first", layer_num=8, head_num=8, head_dim=128)
    backend = open_backend({"url": redis_url, "hash_ahead": hash_ahead, "pipeline_pages": 8}, pool)
    assert backend.options.hashes_ahead is hash_ahead
    keys = random_keys(40)
    assert backend.batch_set_v1(keys, page_indices(0, 40)) == [True] * 40
    stored = raw_store(backend)
    for number, key in enumerate(keys):
        storage_key = backend.keyspace.storage_key(key)
        record = stored[storage_key]
        assert record == encode_record([memoryview(page_bytes(pool, number))], storage_key), f"page {number}"
    assert backend.batch_get_v1(keys, page_indices(40, 40)) == [True] * 40
    assert [page_bytes(pool, p) for p in range(40, 80)] == [page_bytes(pool, p) for p in range(40)]


def test_hash_helper_by_default_only_with_spare_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from hicache_storage_redis import options as redis_options

    for cpus, expected in ((2, False), (redis_options.HASH_AHEAD_MIN_CPUS, True)):
        monkeypatch.setattr(redis_options, "usable_cpus", lambda cpus=cpus: cpus)
        assert redis_options.RedisOptions().hashes_ahead is expected
        assert redis_options.RedisOptions(hash_ahead=not expected).hashes_ahead is (not expected)


def test_one_set_stores_header_and_payload(redis_url: str, open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend({"url": redis_url, "ttl_s": 30}, pool)
    (key,) = random_keys(1)
    assert backend.batch_set_v1([key], page_indices(0, 1)) == [True]
    skey = backend.keyspace.storage_key(key)
    stored = raw_store(backend)[skey]
    assert stored == encode_record([memoryview(page_bytes(pool, 0))], skey)
    ttl_ms = backend.backend.client().pttl(backend.backend.redis_key(skey))
    assert 0 < ttl_ms <= 30_000


def test_ttl_expiry_is_a_miss(redis_url: str, open_backend: Any) -> None:
    backend = open_backend({"url": redis_url, "ttl_s": 0.2})
    keys = random_keys(2)
    assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
    time.sleep(0.4)
    assert backend.batch_exists_each(keys) == [False, False]
    assert backend.batch_get_v1(keys, page_indices(2, 2)) == [False, False]


# ----------------------------------------------------------------------------- key prefixes
def test_key_prefixes_are_isolated_and_clear_is_scoped_to_one(redis_url: str, open_backend: Any) -> None:
    """Two key prefixes on one server share nothing; clear() of one leaves the other and foreign keys."""
    keys = random_keys(3)
    a = open_backend({"url": redis_url})
    b = open_backend({"url": redis_url})
    assert a.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    assert b.batch_exists_each(keys) == [False] * 3
    assert b.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    foreign = redis.Redis.from_url(redis_url)
    foreign.set("unrelated-key", b"keep")
    a.clear()
    assert a.batch_exists_each(keys) == [False] * 3
    assert b.batch_exists_each(keys) == [True] * 3
    assert foreign.get("unrelated-key") == b"keep"
    foreign.delete("unrelated-key")
    foreign.close()


# ----------------------------------------------------------------------------- damaged records
@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_record_is_a_counted_miss(redis_url: str, open_backend: Any, damage: str) -> None:
    """Beyond the suite's misses: each one is counted in ``integrity_failures``, and ``exists`` (STRLEN)
    reports a record only at its exact size."""
    backend = open_backend({"url": redis_url})
    check_damaged_page_is_a_counted_miss(backend, raw_store(backend), damage)


def test_record_one_byte_too_long_is_not_a_page(redis_url: str, open_backend: Any) -> None:
    backend = open_backend({"url": redis_url})
    keys = random_keys(2)
    assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
    store = raw_store(backend)
    assert backend.keyspace is not None
    skey = backend.keyspace.storage_key(keys[0])
    store[skey] += b"x"
    assert backend.batch_exists_each(keys) == [False, True]
    assert backend.batch_get_v1(keys, page_indices(4, 2)) == [False, True]
    assert backend.stats.get("integrity_failures") == 1


# ----------------------------------------------------------------------------- cluster
def test_cluster_round_trip_spans_every_node_and_clear_reaches_all(cluster_nodes: list[str], open_backend: Any) -> None:
    pool = make_pool(num_pages=64)
    backend = open_backend({"cluster": True, "nodes": cluster_nodes, "pipeline_pages": 8}, pool)
    keys = random_keys(30)
    assert backend.batch_set_v1(keys, page_indices(0, 30)) == [True] * 30
    client = backend.backend.client()
    owners = {client.get_node_from_key(backend.backend.redis_key(backend.keyspace.storage_key(k))).name for k in keys}
    assert len(owners) == len(cluster_nodes)
    assert backend.batch_get_v1(keys, page_indices(32, 30)) == [True] * 30
    assert [page_bytes(pool, p) for p in range(32, 62)] == [page_bytes(pool, p) for p in range(30)]
    assert backend.batch_exists(keys) == 30
    assert len([key for key in raw_store(backend) if "._manifest." not in key]) == 30  # the key-space manifest aside
    backend.clear()
    assert backend.batch_exists_each(keys) == [False] * 30


def test_cluster_write_after_redirect_falls_back(cluster_nodes: list[str], open_backend: Any) -> None:
    backend = open_backend({"cluster": True, "nodes": cluster_nodes})
    keys = random_keys(6)
    client = backend.backend.client()
    # Point every slot of the first key's node at the wrong node: the first SETs get MOVED replies.
    rkey = backend.backend.redis_key(backend.keyspace.storage_key(keys[0]))
    right = client.get_node_from_key(rkey)
    wrong = next(n for n in client.get_primaries() if n.name != right.name)
    slot = client.keyslot(rkey)
    client.nodes_manager.slots_cache[slot] = [wrong]
    assert backend.batch_set_v1(keys, page_indices(0, 6)) == [True] * 6
    assert backend.stats.get("redirected_writes") >= 1
    assert backend.batch_get_v1(keys, page_indices(6, 6)) == [True] * 6


# ----------------------------------------------------------------------------- AUTH, eviction
def test_password_auth_works_and_never_leaks(guarded_server: dict[str, Any], open_backend: Any) -> None:
    port, password = guarded_server["port"], guarded_server["password"]
    good = open_backend({"host": "127.0.0.1", "port": port, "password": password})
    keys = random_keys(2)
    assert good.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
    wrong = open_backend({"url": f"redis://:not-{password}@127.0.0.1:{port}/0", "resilience": FAST_RESILIENCE})
    assert wrong.batch_exists_each(keys) == [False, False]
    assert wrong.batch_set_v1(keys, page_indices(0, 2)) == [False, False]
    for backend in (good, wrong):
        shown = repr(backend) + repr(backend.backend) + repr(backend.options) + str(backend.get_stats())
        assert password not in shown
    assert wrong.get_stats()["faults"] >= 1
    wrong.close()


def test_maxmemory_eviction_gives_misses_never_wrong_bytes(guarded_server: dict[str, Any], open_backend: Any) -> None:
    pool = HostKVPool(num_pages=48, page_size=16, layer_num=4, head_num=8, head_dim=64, layout="page_first")
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(9)))
    opts = {"host": "127.0.0.1", "port": guarded_server["port"], "password": guarded_server["password"]}
    backend = open_backend(opts, pool)
    keys = random_keys(24)
    host = [torch.arange(p * 16, (p + 1) * 16) for p in range(48)]
    for begin in range(0, 24, 4):
        written = backend.batch_set_v1(keys[begin : begin + 4], torch.cat(host[begin : begin + 4]))
        assert all(written)
    hits = backend.batch_get_v1(keys, torch.cat(host[24:48]))
    assert 0 < sum(hits) < 24, "2 MiB maxmemory must have evicted some of the 24 pages of 128 KiB"
    for number, hit in enumerate(hits):
        if hit:
            assert page_bytes_n(pool, 24 + number) == page_bytes_n(pool, number)
    assert backend.stats.get("integrity_failures") == 0


def test_error_replies_are_counted_misses_and_not_retried(guarded_server: dict[str, Any], open_backend: Any) -> None:
    """NOPERM (ACL key pattern) and OOM (noeviction) replies: False / misses, counted by code, no redirect retry."""
    port, password = guarded_server["port"], guarded_server["password"]
    admin = redis.Redis(port=port, password=password, socket_timeout=5)
    user, user_password = "scoped-writer", "scoped-pa55"
    admin.acl_setuser(user, enabled=True, passwords=[f"+{user_password}"], keys=["scoped:*"], commands=["+@all"])
    try:
        login = {"host": "127.0.0.1", "port": port, "username": user, "password": user_password}
        outside = open_backend({**login, "key_prefix": "other:"})
        keys = random_keys(3)
        assert outside.batch_set_v1(keys, page_indices(0, 3)) == [False] * 3
        assert outside.batch_get_v1(keys, page_indices(3, 3)) == [False] * 3
        assert outside.stats.get("redis_error_noperm") == 6
        assert outside.stats.get("redirected_writes") == 0 and outside.stats.get("redirected_reads") == 0
        inside = open_backend({**login, "key_prefix": "scoped:"})
        assert inside.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
        assert inside.batch_get_v1(keys, page_indices(3, 3)) == [True] * 3

        admin.config_set("maxmemory-policy", "noeviction")
        pool = HostKVPool(num_pages=24, page_size=16, layer_num=4, head_num=8, head_dim=64, layout="page_first")
        full = open_backend({"host": "127.0.0.1", "port": port, "password": password}, pool)
        written = full.batch_set_v1(random_keys(24), torch.arange(24 * 16))  # 3 MiB into 2 MiB
        assert written.count(False) > 0 and full.stats.get("redis_error_oom") == written.count(False)
    finally:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        admin.acl_deluser(user)
        admin.flushall()
        admin.close()


def page_bytes_n(pool: HostKVPool, page: int) -> bytes:
    return bytes(pool.get_data_page(page * int(pool.page_size)).view(torch.uint8).numpy())


# ----------------------------------------------------------------------------- construction, options
def test_construction_with_server_down_then_bounded_misses() -> None:
    """Construction never contacts the server: an instance over a closed port builds, then answers misses
    and ``False`` within the deadline."""
    storage = make_backend(RedisBackend, {"host": "127.0.0.1", "port": free_port(), "resilience": FAST_RESILIENCE})
    keys = random_keys(3)
    begin = time.monotonic()
    assert storage.batch_exists(keys) == 0
    assert storage.batch_set_v1(keys, page_indices(0, 3)) == [False] * 3
    assert storage.batch_get_v1(keys, page_indices(4, 3)) == [False] * 3
    assert time.monotonic() - begin < 5
    assert storage.get_stats()["faults"] >= 1
    storage.close()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": "http://127.0.0.1:6379"}, "extra_config.url"),
        ({"url": "redis://127.0.0.1:6379", "host": "h"}, "extra_config.host"),
        ({"port": 70000}, "extra_config.port"),
        ({"pipeline_pages": 0}, "extra_config.pipeline_pages"),
        ({"ttl_s": -1}, "extra_config.ttl_s"),
        ({"key_prefix": "has space"}, "extra_config.key_prefix"),
        ({"key_prefix": "{tag}"}, "extra_config.key_prefix"),
        ({"nodes": ["127.0.0.1:7000"]}, "extra_config.nodes"),
        ({"cluster": True, "nodes": ["nohost"]}, "extra_config.nodes"),
        ({"cluster": True, "db": 2}, "extra_config.db"),
        ({"ssl_ca_certs": "/nonexistent/ca.pem"}, "extra_config.ssl_ca_certs"),
        ({"socket_timeout_s": 0}, "extra_config.socket_timeout_s"),
        ({"max_connections": 0}, "extra_config.max_connections"),
        ({"bogus": 1}, "extra_config.bogus"),
        ({"hash_ahead": "yes"}, "extra_config.hash_ahead"),
    ],
)
def test_bad_options_raise_config_error_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(RedisBackend, make_config("m", extra_config=options))
    assert caught.value.option == named


def test_secret_of_wrong_type_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(RedisBackend, make_config("m", extra_config={"password": 98765432}))
    assert caught.value.option == "extra_config.password"
    assert "98765432" not in str(caught.value)


def test_url_credentials_are_redacted() -> None:
    storage = HiCacheStorage(
        RedisBackend, make_config("m", extra_config={"url": "rediss://user:hunter2@127.0.0.1:1/0"})
    )
    assert "hunter2" not in repr(storage.backend) + repr(storage.options)
    assert storage.options.uses_tls
    storage.close()


def test_ttl_is_declared_only_with_ttl_s(open_backend: Any, redis_url: str) -> None:
    assert not open_backend({"url": redis_url}).capabilities.ttl
    backend = open_backend({"url": redis_url, "ttl_s": 30})
    assert backend.capabilities.ttl
    keys = random_keys(1)
    assert backend.batch_set_v1(keys, page_indices(0, 1)) == [True]
    redis_key = backend.backend.redis_key(backend.pool_keyspace().storage_key(keys[0]))
    assert 0 < backend.backend.client().pttl(redis_key) <= 30_000
