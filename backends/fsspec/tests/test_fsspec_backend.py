"""Tests of what is the fsspec backend's own, on memory://, local files and s3fs against a real S3
server (moto): the stored format and layout, what clear keeps, local atomic writes, capabilities,
redaction and options.

Round trips, damaged and vanished pages, delete, clear, isolation, bad requests and the S3 server
stopped and restarted are the conformance suite's (``test_fsspec_conformance.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from fsspec_support import s3_storage_options
from hicache_storage_fsspec import FsspecBackend
from hicache_storage_fsspec.conformance import FsspecHooks

from hicache_storage import ConfigError, HiCacheStorage, make_config
from hicache_storage.plugin.page_format import encode_record
from hicache_storage.testing import make_pool, page_bytes, page_indices, random_keys
from hicache_storage.testing.fixtures import DAMAGES, check_damaged_page_is_a_counted_miss


def fsspec_backend(storage: HiCacheStorage) -> FsspecBackend:
    """The fsspec backend ``storage`` holds."""
    backend = storage.backend
    assert isinstance(backend, FsspecBackend)
    return backend


def test_stored_file_is_the_page_record_at_its_fanned_out_path(location: dict[str, Any], open_backend: Any) -> None:
    pool = make_pool()
    storage = open_backend({**location, "fanout_chars": 3}, pool)
    backend = fsspec_backend(storage)
    (key,) = random_keys(1)
    assert storage.batch_set_v1([key], page_indices(0, 1)) == [True]
    skey = storage.keyspace.storage_key(key)
    path = backend.path_for(skey)
    root, fan, leaf = path.rsplit("/", 2)
    assert root == backend.root and len(fan) == 3 and leaf == skey
    assert backend.fs.cat_file(path) == encode_record([memoryview(page_bytes(pool, 0))], skey)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_file_is_a_counted_miss(location: dict[str, Any], open_backend: Any, damage: str) -> None:
    """Every damage (the header's among them) is a miss counted in ``integrity_failures``."""
    storage = open_backend(location)
    check_damaged_page_is_a_counted_miss(storage, FsspecHooks().raw_store(fsspec_backend(storage)), damage)


def test_clear_keeps_files_not_shaped_like_pages(location: dict[str, Any], open_backend: Any) -> None:
    keys = random_keys(3)
    a = open_backend(location)
    b = open_backend(location, model="other")
    assert a.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    assert b.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    backend = fsspec_backend(a)
    foreign = f"{backend.root}/README.txt"
    backend.fs.pipe_file(foreign, b"keep")
    a.clear(everything=True)
    assert b.batch_exists_each(keys) == [False] * 3, "same url: clear(everything=True) removes every page under it"
    assert backend.fs.cat_file(foreign) == b"keep"
    assert len(FsspecHooks().raw_store(backend)) == 0
    backend.fs.rm_file(foreign)


def test_local_writes_are_atomic_renames_without_leftovers(tmp_path: Path, open_backend: Any) -> None:
    storage = open_backend({"url": f"file://{tmp_path}/c", "fanout_chars": 0})
    keys = random_keys(3)
    assert storage.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    names = sorted(name for name in os.listdir(tmp_path / "c") if "._manifest." not in name)  # pages only
    assert names == sorted(storage.keyspace.storage_key(k) for k in keys)
    backend = fsspec_backend(storage)
    assert backend._rename and backend._local is not None


def test_memory_is_not_shared_across_processes() -> None:
    with HiCacheStorage(FsspecBackend, make_config("m", extra_config={"url": "memory://x"})) as storage:
        assert storage.capabilities.shared is False and storage.capabilities.persistent


def test_credentials_are_redacted(env: dict[str, str], bucket: str) -> None:
    options = {"url": f"s3://{bucket}/r", "storage_options": {**s3_storage_options(env), "secret": "zz-top-secret"}}
    with HiCacheStorage(FsspecBackend, make_config("m", extra_config=options)) as storage:
        shown = repr(storage.backend) + repr(storage.options)
        assert "storage_options=" in shown and "zz-top-secret" not in shown


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": ""}, "extra_config.url"),
        ({"url": "nosuchproto://x"}, "extra_config.url"),
        ({"url": "memory://x", "fanout_chars": 9}, "extra_config.fanout_chars"),
        ({"url": "memory://x", "concurrency": 0}, "extra_config.concurrency"),
        ({"url": "memory://x", "write_mode": "sometimes"}, "extra_config.write_mode"),
        ({"url": "memory://x", "storage_options": "nope"}, "extra_config.storage_options"),
        ({"url": "memory://x", "timeout_s": -1}, "extra_config.timeout_s"),
        ({}, "extra_config.url"),
        ({"url": "memory://x", "bogus": 1}, "extra_config.bogus"),
    ],
)
def test_bad_options_raise_config_error_naming_them(options: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        HiCacheStorage(FsspecBackend, make_config("m", extra_config=options))
    assert caught.value.option == named
