"""The integrity secret: pages carry an HMAC tag in their index entry; one without a valid tag is a miss
(counted, and its entry dropped: writing the page again with the secret stores it anew)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slab_support import indices, make_backend, make_pool, page_bytes

from hicache_storage import ConfigError
from hicache_storage import testing as kit

SECRET_ENV = "SLAB_TEST_SECRET"


def test_pages_need_the_secret_they_were_written_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, "s" * 32)
    monkeypatch.setenv(SECRET_ENV + "_OTHER", "t" * 32)
    pool = make_pool()
    signed = make_backend(tmp_path, pool, integrity_secret_env=SECRET_ENV)
    keys = kit.random_keys(4)
    assert signed.batch_set_v1(keys[:2], indices(0, 2)) == [True, True]
    assert signed.batch_get_v1(keys[:2], indices(8, 2)) == [True, True]
    assert [page_bytes(pool, 8 + i) for i in range(2)] == [page_bytes(pool, i) for i in range(2)]
    plain = make_backend(tmp_path, make_pool())  # no secret: writes untagged pages, still checks the rest
    assert plain.batch_set_v1(keys[2:], indices(2, 2)) == [True, True]
    assert plain.batch_get_v1(keys, indices(8, 4)) == [True] * 4
    assert signed.batch_get_v1(keys[2:], indices(8, 2)) == [False, False]  # untagged: refused
    assert signed.stats.get("integrity_failures") == 2
    forger = make_backend(tmp_path, make_pool(), integrity_secret_env=SECRET_ENV + "_OTHER")
    assert forger.batch_set_v1(keys[:1], indices(0, 1)) == [True]  # same key, a tag of another secret
    assert signed.batch_get_v1(keys[:2], indices(8, 2)) == [False, True]
    assert signed.batch_set_v1(keys[:1], indices(0, 1)) == [True]  # tagged again
    assert signed.batch_get_v1(keys[:1], indices(8, 1)) == [True] and page_bytes(pool, 8) == page_bytes(pool, 0)
    for storage in (signed, plain, forger):
        storage.close()


def test_a_missing_or_short_secret_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    with pytest.raises(ConfigError) as caught:
        make_backend(tmp_path, integrity_secret_env=SECRET_ENV)
    assert caught.value.option == "extra_config.integrity_secret_env"
    monkeypatch.setenv(SECRET_ENV, "short")
    with pytest.raises(ConfigError, match="at least"):
        make_backend(tmp_path, integrity_secret_env=SECRET_ENV)
