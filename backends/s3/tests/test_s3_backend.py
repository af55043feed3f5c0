"""Tests of what is the s3 backend's own, against a real S3 server (moto) on 127.0.0.1: its object
layout, listing, what clear keeps, start-up checks and options.

Round trips, damaged and vanished pages, delete, clear, isolation, bad requests and the server
stopped and restarted are the conformance suite's (``test_s3_conformance.py``).
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from hicache_storage_s3 import S3Backend
from hicache_storage_s3.conformance import S3Hooks
from s3_support import s3_client, s3_options

from hicache_storage import ConfigError, HiCacheStorage, make_config
from hicache_storage.plugin.page_format import encode_record
from hicache_storage.testing import FAST_RESILIENCE, make_pool, page_bytes, page_indices, random_keys
from hicache_storage.testing.fixtures import DAMAGES, check_damaged_page_is_a_counted_miss


def s3_backend(storage: HiCacheStorage) -> S3Backend:
    """The S3 backend ``storage`` holds."""
    backend = storage.backend
    assert isinstance(backend, S3Backend)
    return backend


def test_object_layout_is_fanned_out_record(env: dict[str, str], open_backend: Any, bucket: str) -> None:
    pool = make_pool()
    storage = open_backend({"fanout_chars": 3}, pool)
    backend = s3_backend(storage)
    (key,) = random_keys(1)
    assert storage.batch_set_v1([key], page_indices(0, 1)) == [True]
    skey = storage.keyspace.storage_key(key)
    name = backend.object_key(skey)
    prefix, fan, leaf = name.split("/")
    assert prefix == backend.root and len(fan) == 3 and leaf == skey
    body = s3_client(env).get_object(Bucket=bucket, Key=name)["Body"].read()  # type: ignore[attr-defined]
    assert body == encode_record([memoryview(page_bytes(pool, 0))], skey)


@pytest.mark.parametrize("fanout", [0, 2])
def test_listing_names_the_pages_of_a_key_space(open_backend: Any, fanout: int) -> None:
    storage = open_backend({"fanout_chars": fanout})
    keys = random_keys(3)
    assert storage.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    space = storage.keyspace
    listing = storage.list_pages(space.prefix)
    pages = {page.key: page.nbytes for page in listing.pages if "_manifest." not in page.key}
    assert listing.cursor is None
    assert sorted(pages) == sorted(space.storage_keys(keys))
    stored = S3Hooks().raw_store(s3_backend(storage))
    assert all(size == len(stored[skey]) for skey, size in pages.items())
    assert all(page.modified is not None for page in listing.pages)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_object_is_a_counted_miss(open_backend: Any, damage: str) -> None:
    """Every damage (the header's among them) is a miss counted in ``integrity_failures``."""
    storage = open_backend(pool=make_pool())
    check_damaged_page_is_a_counted_miss(storage, S3Hooks().raw_store(s3_backend(storage)), damage)


def test_clear_keeps_objects_not_shaped_like_pages_and_other_prefixes(
    env: dict[str, str], open_backend: Any, bucket: str
) -> None:
    keys = random_keys(3)
    a, b = open_backend(), open_backend()
    assert a.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    assert b.batch_exists_each(keys) == [False] * 3, "another prefix is another store"
    assert b.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    raw = s3_client(env)
    notes = f"{s3_backend(a).root}/notes.txt"
    raw.put_object(Bucket=bucket, Key=notes, Body=b"keep")  # type: ignore[attr-defined]
    a.clear(everything=True)
    assert a.batch_exists_each(keys) == [False] * 3
    assert b.batch_exists_each(keys) == [True] * 3
    assert raw.get_object(Bucket=bucket, Key=notes)["Body"].read() == b"keep"  # type: ignore[attr-defined]
    assert len(S3Hooks().raw_store(s3_backend(a))) == 0
    raw.delete_object(Bucket=bucket, Key=notes)  # type: ignore[attr-defined]


def test_missing_bucket_is_a_config_error_naming_it(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(S3Backend, make_config("m", extra_config=s3_options(env, "no-such-bucket-here")))
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
        "resilience": FAST_RESILIENCE,
    }
    storage = HiCacheStorage(S3Backend, make_config("m", extra_config=options))
    storage.register_mem_pool_host(make_pool())
    keys = random_keys(2)
    begin = time.monotonic()
    assert storage.batch_exists_each(keys) == [False, False]
    assert storage.batch_set_v1(keys, page_indices(0, 2)) == [False, False]
    assert storage.batch_get_v1(keys, page_indices(2, 2)) == [False, False]
    assert time.monotonic() - begin < 5
    shown = repr(storage.backend) + repr(storage.options) + str(storage.get_stats())
    assert "bucket='some-bucket'" in shown  # the options are shown, their secrets are not
    assert "s3cr3t-value-do-not-show" not in shown and "AKIDEXAMPLE" not in shown
    assert storage.stats.get("startup_unreachable") == 1
    storage.close()


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
        ({"bucket": "okay-bucket", "timeout_s": 0}, "extra_config.timeout_s"),
        ({}, "extra_config.bucket"),
        ({"bucket": "okay-bucket", "bogus": 1}, "extra_config.bogus"),
    ],
)
def test_bad_options_raise_config_error_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(S3Backend, make_config("m", extra_config={"check_bucket": False, **options}))
    assert caught.value.option == named


def test_secret_of_wrong_type_is_not_echoed() -> None:
    options = {"bucket": "okay-bucket", "aws_access_key_id": "id", "aws_secret_access_key": 31415926}
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(S3Backend, make_config("m", extra_config=options))
    assert caught.value.option == "extra_config.aws_secret_access_key"
    assert "31415926" not in str(caught.value)
