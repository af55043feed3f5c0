"""The fsspec backend over s3fs against a moto server that enforces IAM authentication (its own).

Valid keys store and read pages byte-exact; an unknown key, a wrong secret, a user without S3
permission or no credentials at all is a :class:`ConfigError` naming the bucket at construction,
and misses / ``False`` (never an exception) when the check is off or the key is revoked while
running. No secret ever shows in an error, a repr, the stats or a log record.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hicache_storage_fsspec import FsspecBackend

from hicache_storage import ConfigError, make_config
from hicache_storage.testing import (
    FAST_RESILIENCE,
    make_backend,
    make_pool,
    page_bytes,
    page_indices,
    random_keys,
)
from hicache_storage.testing_s3 import (
    REFUSED_CASES,
    AuthS3Server,
    IamKey,
    assert_calls_miss,
    assert_hidden,
    assert_not_logged,
    refused_key,
)

pytest.importorskip("s3fs")
pytestmark = pytest.mark.timeout(60)

REFUSED = list(REFUSED_CASES)


@pytest.fixture(scope="module")
def server() -> Iterator[AuthS3Server]:
    try:
        running = AuthS3Server(f"hc-fsauth-{secrets.token_hex(4)}")
    except FileNotFoundError as error:
        pytest.skip(str(error))
    yield running
    running.close()


def options(server: AuthS3Server, key: IamKey | None, prefix: str | None = None, **extra: Any) -> dict[str, Any]:
    storage: dict[str, Any] = {"endpoint_url": server.endpoint, "client_kwargs": {"region_name": server.REGION}}
    if key is not None:
        storage.update(key=key.access_key_id, secret=key.secret_access_key)
    url = f"s3://{server.bucket}/{prefix or 't' + secrets.token_hex(4)}"
    return {"url": url, "storage_options": storage, "resilience": FAST_RESILIENCE, **extra}


def test_valid_keys_round_trip_is_byte_exact(server: AuthS3Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pool = make_pool()
    backend = make_backend(FsspecBackend, options(server, server.writer), pool)
    keys = random_keys(4)
    written = [page_bytes(pool, p) for p in range(4)]
    try:
        assert backend.batch_set_v1(keys, page_indices(0, 4)) == [True] * 4
        assert backend.batch_exists(keys) == 4
        assert backend.batch_get_v1(keys, page_indices(8, 4)) == [True] * 4
        assert [page_bytes(pool, p) for p in range(8, 12)] == written
        got = backend.batch_get(keys[:1])
        assert got[0] is not None and bytes(got[0].view(torch.uint8).numpy()) == written[0]
        assert_hidden(server.writer, repr(backend), str(backend.get_stats()))
    finally:
        backend.clear()
        backend.close()
    assert_not_logged(caplog, server.writer.secret_access_key)


@pytest.mark.parametrize("case", REFUSED)
def test_refused_credentials_are_a_config_error_naming_the_bucket(
    server: AuthS3Server, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    key = refused_key(server, case)
    with pytest.raises(ConfigError) as caught:
        FsspecBackend(make_config("m", extra_config=options(server, key)))
    error = caught.value
    assert error.option == "extra_config.storage_options"
    assert repr(server.bucket) in str(error)
    assert "credentials" in str(error) and "permissions" in str(error)
    assert_hidden(key, str(error), repr(error))
    assert_not_logged(caplog, key.secret_access_key)


def test_no_credentials_at_all_is_a_config_error(server: AuthS3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigError) as caught:
        FsspecBackend(make_config("m", extra_config=options(server, None)))
    assert caught.value.option == "extra_config.storage_options"
    assert repr(server.bucket) in str(caught.value) and "credentials" in str(caught.value)


@pytest.mark.parametrize("case", REFUSED)
def test_refused_credentials_without_the_check_give_misses(
    server: AuthS3Server, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    pool = make_pool()
    writer = make_backend(FsspecBackend, options(server, server.writer), pool)
    keys = random_keys(2)
    assert writer.batch_set_v1(keys, page_indices(0, 2)) == [True, True]  # stored, yet not readable with `key`
    key = refused_key(server, case)
    prefix = writer.root.split("/", 1)[1]
    backend = make_backend(FsspecBackend, options(server, key, prefix, check_bucket=False), pool)
    try:
        assert_calls_miss(backend, pool, keys)
        assert_hidden(key, repr(backend), str(backend.get_stats()))
        assert writer.batch_exists(keys) == 2
    finally:
        backend.close()
        writer.clear()
        writer.close()
    assert_not_logged(caplog, key.secret_access_key)


def test_key_revoked_while_running_gives_misses(server: AuthS3Server, caplog: pytest.LogCaptureFixture) -> None:
    key = server.new_writer("rotated")  # before capturing: the IAM reply that creates it holds the secret
    caplog.set_level(logging.DEBUG)
    pool = make_pool()
    backend = make_backend(FsspecBackend, options(server, key), pool)
    keys = random_keys(2)
    try:
        assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
        server.revoke("rotated", key)
        assert_calls_miss(backend, pool, keys)
        assert_hidden(key, repr(backend), str(backend.get_stats()))
    finally:
        backend.close()
    assert_not_logged(caplog, key.secret_access_key)
