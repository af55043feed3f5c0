"""Tests of the s3 backend against a real S3 server (moto) on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import torch
from hicache_storage_s3 import S3Backend
from s3_support import SERVICES, control, s3_client, s3_options

from hicache_storage import ConfigError, load_backend, make_config
from hicache_storage.plugin.page_format import encode_record
from hicache_storage.testing import (
    FAST_RESILIENCE,
    PAGE_SIZE,
    check_outage_and_recovery,
    make_pool,
    page_bytes,
    page_indices,
    random_keys,
)
from hicache_storage.testing.fixtures import DAMAGES, check_damaged_page_is_a_counted_miss

FAST = FAST_RESILIENCE


@pytest.mark.parametrize("layout", ["layer_first", "page_first", "page_first_direct"])
@pytest.mark.parametrize("is_mla", [False, True], ids=["mha", "mla"])
def test_v1_round_trip_is_byte_exact(open_backend: Any, layout: str, is_mla: bool) -> None:
    pool = make_pool(layout=layout, is_mla=is_mla)
    backend = open_backend(pool=pool)
    keys = random_keys(5)
    written = [page_bytes(pool, p) for p in range(5)]
    assert backend.batch_set_v1(keys, page_indices(0, 5)) == [True] * 5
    assert backend.batch_get_v1(keys, page_indices(8, 5)) == [True] * 5
    assert [page_bytes(pool, p) for p in range(8, 13)] == written
    assert backend.batch_exists(keys) == 5


def test_v0_round_trip_and_partial_hits(open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend({"max_workers": 2}, pool)
    keys = random_keys(4)
    values = [pool.get_data_page(p * PAGE_SIZE) for p in (0, 2)]
    assert backend.batch_set([keys[0], keys[2]], values) is True
    assert backend.batch_exists_each(keys) == [True, False, True, False]
    got = backend.batch_get(keys)
    assert got[1] is None and got[3] is None
    assert bytes(got[2].view(torch.uint8).numpy()) == page_bytes(pool, 2)


def test_object_layout_is_fanned_out_record(env: dict[str, str], open_backend: Any, bucket: str) -> None:
    pool = make_pool()
    backend = open_backend({"fanout_chars": 3}, pool)
    (key,) = random_keys(1)
    assert backend.batch_set_v1([key], page_indices(0, 1)) == [True]
    skey = backend.keyspace.storage_key(key)
    name = backend.object_key(skey)
    prefix, fan, leaf = name.split("/")
    assert prefix == backend.root and len(fan) == 3 and leaf == skey
    body = s3_client(env).get_object(Bucket=bucket, Key=name)["Body"].read()  # type: ignore[attr-defined]
    assert body == encode_record([memoryview(page_bytes(pool, 0))], skey)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_object_is_a_counted_miss(open_backend: Any, damage: str) -> None:
    check_damaged_page_is_a_counted_miss(open_backend(pool=make_pool()), damage)


def test_isolation_clear_and_delete(env: dict[str, str], open_backend: Any, bucket: str) -> None:
    keys = random_keys(3)
    a, b = open_backend(), open_backend()
    other_model = open_backend({"prefix": a.root}, model="other")
    assert a.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    assert b.batch_exists_each(keys) == [False] * 3
    assert other_model.batch_exists_each(keys) == [False] * 3
    assert b.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    raw = s3_client(env)
    raw.put_object(Bucket=bucket, Key=f"{a.root}/notes.txt", Body=b"keep")  # type: ignore[attr-defined]
    assert a.delete(keys[:1]) == [True]
    assert a.batch_exists_each(keys) == [False, True, True]
    a.clear()
    assert a.batch_exists_each(keys) == [False] * 3
    assert b.batch_exists_each(keys) == [True] * 3
    assert raw.get_object(Bucket=bucket, Key=f"{a.root}/notes.txt")["Body"].read() == b"keep"  # type: ignore[attr-defined]


def test_missing_bucket_is_a_config_error_naming_it(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        S3Backend(make_config("m", extra_config=s3_options(env, "no-such-bucket-here")))
    assert caught.value.option == "extra_config.bucket"
    assert "no-such-bucket-here" in str(caught.value)


def test_unreachable_endpoint_does_not_fail_construction() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = {
        "bucket": "some-bucket",
        "endpoint_url": f"http://127.0.0.1:{port}",
        "region": "us-east-1",
        "aws_access_key_id": "AKIDEXAMPLE",
        "aws_secret_access_key": "s3cr3t-value-do-not-show",
        "resilience": FAST,
    }
    backend = S3Backend(make_config("m", extra_config=options))
    backend.register_mem_pool_host(make_pool())
    keys = random_keys(2)
    begin = time.monotonic()
    assert backend.batch_exists_each(keys) == [False, False]
    assert backend.batch_set_v1(keys, page_indices(0, 2)) == [False, False]
    assert backend.batch_get_v1(keys, page_indices(2, 2)) == [False, False]
    assert time.monotonic() - begin < 5
    shown = repr(backend) + str(backend.get_stats())
    assert "s3cr3t-value-do-not-show" not in shown and "AKIDEXAMPLE" not in shown
    assert backend.stats.get("startup_unreachable") == 1
    backend.close()


def test_server_stopped_then_restarted(env: dict[str, str], open_backend: Any, bucket: str) -> None:
    backend = open_backend({"resilience": FAST})

    def start() -> None:
        control("start", "s3")
        SERVICES.s3_bucket(bucket, env)  # moto keeps no state

    check_outage_and_recovery(backend, lambda: control("stop", "s3"), start)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"bucket": "ab"}, "extra_config.bucket"),
        ({"bucket": "Upper_Case"}, "extra_config.bucket"),
        ({"bucket": "192.168.1.1"}, "extra_config.bucket"),
        ({"bucket": "okay-bucket", "prefix": "bad prefix"}, "extra_config.prefix"),
        ({"bucket": "okay-bucket", "endpoint_url": "localhost:9000"}, "extra_config.endpoint_url"),
        ({"bucket": "okay-bucket", "aws_access_key_id": "x"}, "extra_config.aws_secret_access_key"),
        ({"bucket": "okay-bucket", "max_workers": 0}, "extra_config.max_workers"),
        ({"bucket": "okay-bucket", "fanout_chars": 9}, "extra_config.fanout_chars"),
        ({"bucket": "okay-bucket", "addressing_style": "diagonal"}, "extra_config.addressing_style"),
        ({}, "extra_config.bucket"),
        ({"bucket": "okay-bucket", "bogus": 1}, "extra_config.bogus"),
    ],
)
def test_bad_options_raise_config_error_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        S3Backend(make_config("m", extra_config={"check_bucket": False, **options}))
    assert caught.value.option == named


def test_secret_of_wrong_type_is_not_echoed() -> None:
    options = {"bucket": "okay-bucket", "aws_access_key_id": "id", "aws_secret_access_key": 31415926}
    with pytest.raises(ConfigError) as caught:
        S3Backend(make_config("m", extra_config=options))
    assert caught.value.option == "extra_config.aws_secret_access_key"
    assert "31415926" not in str(caught.value)


def test_entry_point_loads(env: dict[str, str], bucket: str) -> None:
    backend = load_backend("s3", make_config("m", extra_config=s3_options(env, bucket)))
    assert isinstance(backend, S3Backend)
    assert backend.capabilities.supports_clear and backend.capabilities.verifies_integrity
    backend.close()
