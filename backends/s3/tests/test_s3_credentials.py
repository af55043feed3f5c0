"""The s3 backend against a moto server that enforces IAM authentication (its own, on a spare port).

Valid keys store and read pages byte-exact; an unknown key, a wrong secret or a user without S3
permission is a :class:`ConfigError` naming the bucket at construction, and misses / ``False``
(never an exception) when the check is skipped or the key is revoked while running. No secret ever
shows in an error, a repr, the stats or a log record (botocore's DEBUG records included).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hicache_storage_s3 import S3Backend

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

pytestmark = pytest.mark.timeout(60)

REFUSED = list(REFUSED_CASES)


@pytest.fixture(scope="module")
def server() -> Iterator[AuthS3Server]:
    try:
        running = AuthS3Server(f"hc-auth-{secrets.token_hex(4)}")
    except FileNotFoundError as error:
        pytest.skip(str(error))
    yield running
    running.close()


def options(server: AuthS3Server, key: IamKey | None, **extra: Any) -> dict[str, Any]:
    credentials = {}
    if key is not None:
        credentials = {"aws_access_key_id": key.access_key_id, "aws_secret_access_key": key.secret_access_key}
    return {
        "bucket": server.bucket,
        "endpoint_url": server.endpoint,
        "region": server.REGION,
        **credentials,
        "prefix": f"t{secrets.token_hex(4)}",
        "resilience": FAST_RESILIENCE,
        **extra,
    }


def test_valid_keys_round_trip_is_byte_exact(server: AuthS3Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    pool = make_pool()
    backend = make_backend(S3Backend, options(server, server.writer), pool)
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
        S3Backend(make_config("m", extra_config=options(server, key)))
    error = caught.value
    assert error.option == "extra_config.aws_access_key_id"
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
        S3Backend(make_config("m", extra_config=options(server, None)))
    assert caught.value.option == "extra_config.aws_access_key_id"
    assert "credentials" in str(caught.value)


@pytest.mark.parametrize("case", REFUSED)
def test_refused_credentials_without_the_check_give_misses(
    server: AuthS3Server, caplog: pytest.LogCaptureFixture, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    pool = make_pool()
    writer = make_backend(S3Backend, options(server, server.writer), pool)
    keys = random_keys(2)
    assert writer.batch_set_v1(keys, page_indices(0, 2)) == [True, True]  # stored, yet not readable with `key`
    key = refused_key(server, case)
    backend = make_backend(S3Backend, options(server, key, prefix=writer.root, check_bucket=False), pool)
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
    backend = make_backend(S3Backend, options(server, key), pool)
    keys = random_keys(2)
    try:
        assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
        server.revoke("rotated", key)
        assert_calls_miss(backend, pool, keys)
        assert_hidden(key, repr(backend), str(backend.get_stats()))
    finally:
        backend.close()
    assert_not_logged(caplog, key.secret_access_key)
