"""The fsspec backend's page requests on s3fs (``hicache_storage_fsspec.s3_requests``): one request per
page call on a real S3 server (moto), and one more after a 5xx answer (on a server that gives them on
demand: :mod:`flaky_s3`)."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from flaky_s3 import FlakyS3, flaky_s3
from fsspec.asyn import sync
from fsspec_support import s3_storage_options
from hicache_storage_fsspec import FsspecBackend

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.testing import make_pool, page_bytes, page_indices, random_keys

pytest.importorskip("s3fs")


def operations_of(storage: HiCacheStorage) -> Counter[str]:
    """A counter of the S3 operations the backend's s3fs client sends from now on."""
    backend = storage.backend
    assert isinstance(backend, FsspecBackend)
    client = sync(backend.fs.loop, backend.fs.get_s3)
    sent: Counter[str] = Counter()

    def count(model: Any, **_kwargs: Any) -> None:
        sent[model.name] += 1

    client.meta.events.register("before-call.s3", count)
    return sent


@pytest.mark.services
def test_a_page_call_is_one_request(env: dict[str, str], bucket: str, open_backend: Any) -> None:
    """A read is one GET (no HEAD first), an existence check one HEAD (no listing after a 404), a write one PUT."""
    pool = make_pool()
    options = {"url": f"s3://{bucket}/{secrets.token_hex(4)}", "storage_options": s3_storage_options(env)}
    storage = open_backend({**options, "manifests": False}, pool)
    sent = operations_of(storage)
    keys = random_keys(4)
    assert storage.batch_set_v1(keys[:2], page_indices(0, 2)) == [True, True]
    assert storage.batch_get_v1(keys[:2], page_indices(2, 2)) == [True, True]
    assert [page_bytes(pool, 2), page_bytes(pool, 3)] == [page_bytes(pool, 0), page_bytes(pool, 1)]
    assert storage.batch_exists_each(keys) == [True, True, False, False]
    assert storage.batch_get_v1(keys[2:3], page_indices(2, 1)) == [False]
    assert sent == {"PutObject": 2, "GetObject": 3, "HeadObject": 4}


@pytest.fixture
def flaky() -> Iterator[FlakyS3]:
    with flaky_s3(fail_first=1) as server:
        yield server


def open_on(server: FlakyS3, pool: Any) -> HiCacheStorage:
    extra = {
        "url": "s3://bucket/root",
        "storage_options": server.storage_options(),
        "check_bucket": False,
        "manifests": False,
        "resilience": False,
    }
    storage = HiCacheStorage(FsspecBackend, make_config("m", extra_config=extra))
    storage.register_mem_pool_host(pool)
    return storage


def test_a_5xx_answer_is_sent_again_once_and_counted(flaky: FlakyS3) -> None:
    pool = make_pool()
    storage = open_on(flaky, pool)
    try:
        keys = random_keys(2)
        assert storage.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
        assert storage.batch_get_v1(keys, page_indices(2, 2)) == [True, True]
        assert [page_bytes(pool, 2), page_bytes(pool, 3)] == [page_bytes(pool, 0), page_bytes(pool, 1)]
        assert storage.batch_exists_each(keys) == [True, True]
        assert (flaky.count("PUT"), flaky.count("GET"), flaky.count("HEAD")) == (4, 4, 4)  # each page: 500, then 200
        stats = storage.get_stats()
        assert stats["counters"]["server_error_retries"] == 6
        assert stats["counters"].get("key_faults", 0) == 0 and stats["faults"] == 0
    finally:
        storage.close()


def test_a_server_that_keeps_answering_5xx_is_asked_twice_per_page() -> None:
    """The second 5xx stands: the page is a counted fault (a miss), after two requests, not more."""
    pool = make_pool()
    with flaky_s3(fail_first=None) as server:
        storage = open_on(server, pool)
        try:
            keys = random_keys(3)
            assert storage.batch_set_v1(keys, page_indices(0, 3)) == [False] * 3
            assert storage.batch_get_v1(keys, page_indices(0, 3)) == [False] * 3
            assert (server.count("PUT"), server.count("GET")) == (6, 6)
            stats = storage.get_stats()
            assert stats["counters"]["server_error_retries"] == 6  # one per page and call
            assert stats["faults"] == 2  # every page of each call faulted: the call is one fault
        finally:
            storage.close()
