"""Tests of the fsspec backend on memory://, local files and s3fs against a real S3 server (moto)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from fsspec_support import SERVICES, control, s3_storage_options
from hicache_storage_fsspec import FsspecBackend

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


@pytest.mark.parametrize("layout", ["layer_first", "page_first"])
@pytest.mark.parametrize("is_mla", [False, True], ids=["mha", "mla"])
def test_v1_round_trip_is_byte_exact(location: dict[str, Any], open_backend: Any, layout: str, is_mla: bool) -> None:
    pool = make_pool(layout=layout, is_mla=is_mla)
    backend = open_backend(location, pool)
    keys = random_keys(5)
    written = [page_bytes(pool, p) for p in range(5)]
    assert backend.batch_set_v1(keys, page_indices(0, 5)) == [True] * 5
    assert backend.batch_get_v1(keys, page_indices(8, 5)) == [True] * 5
    assert [page_bytes(pool, p) for p in range(8, 13)] == written
    assert backend.batch_exists(keys) == 5


def test_v0_partial_hits_delete_and_stored_format(location: dict[str, Any], open_backend: Any) -> None:
    pool = make_pool()
    backend = open_backend(location, pool)
    keys = random_keys(4)
    values = [pool.get_data_page(p * PAGE_SIZE) for p in (0, 2)]
    assert backend.batch_set([keys[0], keys[2]], values) is True
    assert backend.batch_exists_each(keys) == [True, False, True, False]
    got = backend.batch_get(keys)
    assert got[1] is None and got[3] is None
    assert bytes(got[0].view(torch.uint8).numpy()) == page_bytes(pool, 0)
    skey = backend.keyspace.storage_key(keys[0])
    assert backend.fs.cat_file(backend.path_for(skey)) == encode_record([memoryview(page_bytes(pool, 0))], skey)
    assert backend.delete(keys[:2]) == [True, True]
    assert backend.batch_exists_each(keys) == [False, False, True, False]


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_file_is_a_counted_miss(location: dict[str, Any], open_backend: Any, damage: str) -> None:
    check_damaged_page_is_a_counted_miss(open_backend(location), damage)


def test_isolation_and_scoped_clear(location: dict[str, Any], open_backend: Any) -> None:
    keys = random_keys(3)
    a = open_backend(location)
    b = open_backend(location, model="other")
    assert a.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    assert b.batch_exists_each(keys) == [False] * 3
    assert b.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    foreign = f"{a.root}/README.txt"
    a.fs.pipe_file(foreign, b"keep")
    a.clear()
    assert a.batch_exists_each(keys) == [False] * 3
    assert b.batch_exists_each(keys) == [True] * 3, "clear() removes only the caller's key space"
    a.clear(everything=True)
    assert b.batch_exists_each(keys) == [False] * 3, "same url: clear(everything=True) removes every page under it"
    assert a.fs.cat_file(foreign) == b"keep"
    assert len(a.raw_store()) == 0


def test_local_writes_are_atomic_renames_without_leftovers(tmp_path: Path, open_backend: Any) -> None:
    backend = open_backend({"url": f"file://{tmp_path}/c", "fanout_chars": 0})
    keys = random_keys(3)
    assert backend.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    names = sorted(name for name in os.listdir(tmp_path / "c") if "._manifest." not in name)  # pages only
    assert names == sorted(backend.keyspace.storage_key(k) for k in keys)
    assert backend._rename and backend._local is not None


def test_memory_is_not_shared_across_processes() -> None:
    backend = FsspecBackend(make_config("m", extra_config={"url": "memory://x"}))
    assert backend.capabilities.shared is False and backend.capabilities.persistent
    backend.close()


def test_s3fs_stopped_server_gives_bounded_misses_then_recovers(
    env: dict[str, str], bucket: str, open_backend: Any
) -> None:
    options = {"url": f"s3://{bucket}/fault", "storage_options": s3_storage_options(env), "resilience": FAST}
    backend = open_backend(options)

    def start() -> None:
        control("start", "s3")
        SERVICES.s3_bucket(bucket, env)  # moto keeps no state

    check_outage_and_recovery(backend, lambda: control("stop", "s3"), start)


def test_credentials_are_redacted(env: dict[str, str], bucket: str) -> None:
    options = {"url": f"s3://{bucket}/r", "storage_options": {**s3_storage_options(env), "secret": "zz-top-secret"}}
    backend = FsspecBackend(make_config("m", extra_config=options))
    assert "zz-top-secret" not in repr(backend)
    backend.close()


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": ""}, "extra_config.url"),
        ({"url": "nosuchproto://x"}, "extra_config.url"),
        ({"url": "memory://x", "fanout_chars": 9}, "extra_config.fanout_chars"),
        ({"url": "memory://x", "concurrency": 0}, "extra_config.concurrency"),
        ({"url": "memory://x", "write_mode": "sometimes"}, "extra_config.write_mode"),
        ({"url": "memory://x", "storage_options": "nope"}, "extra_config.storage_options"),
        ({}, "extra_config.url"),
        ({"url": "memory://x", "bogus": 1}, "extra_config.bogus"),
    ],
)
def test_bad_options_raise_config_error_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FsspecBackend(make_config("m", extra_config=options))
    assert caught.value.option == named


def test_entry_point_loads() -> None:
    backend = load_backend("fsspec", make_config("m", extra_config={"url": "memory://ep"}))
    assert isinstance(backend, FsspecBackend)
    backend.close()
