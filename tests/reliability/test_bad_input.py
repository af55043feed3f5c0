"""Bad input: non-finite and out-of-range options, a non-dict ``extra_config``, mixed key types,
hostile keys on Mooncake. Every one is refused at once with a ``ValueError`` subclass naming the
option or the key; nothing is written and no server is needed to say so."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from rel_support import PrivateServices, make_keys, make_pool, open_mooncake, round_trip_ok

from hicache_storage import ConfigError, InvalidKeyError, load_backend, make_config

pytestmark = pytest.mark.timeout(120)

NON_FINITE = [math.nan, math.inf, -math.inf]


CLASSES = {
    "file": "FileBackend",
    "sim": "SimBackend",
    "redis": "RedisBackend",
    "s3": "S3Backend",
    "fsspec": "FsspecBackend",
    "mooncake": "MooncakeBackend",
}


def _class(name: str) -> Any:
    return getattr(pytest.importorskip(f"hicache_storage_{name}"), CLASSES[name])


BASE = {
    "file": {"path": "/tmp/hc-bad-input-never-created"},
    "sim": {},
    "redis": {"url": "redis://127.0.0.1:1/0"},
    "s3": {"bucket": "never-contacted", "check_bucket": False, "endpoint_url": "http://127.0.0.1:1"},
    "fsspec": {"url": "memory://bad-input"},
    "mooncake": {"master_server_address": "127.0.0.1:1"},
}

#: (backend, bad options, option the ConfigError must name)
BAD_OPTIONS = [
    *[("redis", {"resilience": {"deadline_s": v}}, "extra_config.resilience.deadline_s") for v in NON_FINITE],
    *[("redis", {"socket_timeout_s": v}, "extra_config.socket_timeout_s") for v in NON_FINITE],
    *[("redis", {"ttl_s": v}, "extra_config.ttl_s") for v in NON_FINITE],
    ("redis", {"ttl_s": 1e300}, "extra_config.ttl_s"),
    ("redis", {"ttl_s": 10**400}, "extra_config.ttl_s"),
    ("redis", {"max_connections": 2**64}, "extra_config.max_connections"),
    ("redis", {"socket_timeout_s": 1e9}, "extra_config.socket_timeout_s"),
    *[("s3", {"timeout_s": v}, "extra_config.timeout_s") for v in NON_FINITE],
    ("s3", {"timeout_s": -1}, "extra_config.timeout_s"),
    ("s3", {"max_workers": 10**30}, "extra_config.max_workers"),
    ("s3", {"fanout_chars": -1}, "extra_config.fanout_chars"),
    ("s3", {"bucket": 5}, "extra_config.bucket"),
    ("s3", {"resilience": {"breaker_reset_s": math.inf}}, "extra_config.resilience.breaker_reset_s"),
    *[("fsspec", {"timeout_s": v}, "extra_config.timeout_s") for v in NON_FINITE],
    ("fsspec", {"concurrency": 0}, "extra_config.concurrency"),
    ("mooncake", {"rpc_timeout_ms": 0}, "extra_config.rpc_timeout_ms"),
    ("mooncake", {"replica_num": 10**9}, "extra_config.replica_num"),
    ("mooncake", {"global_segment_size": "99999999TB"}, "extra_config.global_segment_size"),
    ("mooncake", {"local_buffer_size": math.nan}, "extra_config.local_buffer_size"),
    ("mooncake", {"staging_buffer_size": 2**70}, "extra_config.staging_buffer_size"),
    ("mooncake", {"resilience": {"deadline_s": math.nan}}, "extra_config.resilience.deadline_s"),
    ("mooncake", {"setup_retries": -1}, "extra_config.setup_retries"),
    *[("sim", {"sim_write_gbps": v}, "extra_config.sim_write_gbps") for v in NON_FINITE],
    ("file", {"resilience": {"retries": 10**6}}, "extra_config.resilience.retries"),
]


@pytest.mark.parametrize(("name", "options", "option"), BAD_OPTIONS, ids=lambda v: str(v)[:40])
def test_bad_options_are_config_errors_naming_the_option(name: str, options: dict[str, Any], option: str) -> None:
    backend_cls = _class(name)
    with pytest.raises(ConfigError) as caught:
        load_backend(backend_cls, make_config("m", extra_config={**BASE[name], **options}))
    assert caught.value.option == option, str(caught.value)


@pytest.mark.parametrize("name", sorted(BASE))
@pytest.mark.parametrize("extra", ["url=redis://x", ["a"], 7, ("k", "v")], ids=["str", "list", "int", "tuple"])
def test_extra_config_that_is_not_a_dict(name: str, extra: Any) -> None:
    backend_cls = _class(name)
    config = make_config("m")
    config.extra_config = extra
    with pytest.raises(ConfigError, match=r"expected a dict") as caught:
        load_backend(backend_cls, config)
    assert caught.value.option == "extra_config"


# --------------------------------------------------------------------------- keys
@pytest.mark.services
def test_one_non_string_key_makes_redis_exists_raise(services: PrivateServices) -> None:
    from hicache_storage_redis import RedisBackend

    services.ctl("start", "redis")
    backend = load_backend(
        RedisBackend, make_config("m", extra_config={"url": services.redis_url, "key_prefix": "bad:"})
    )
    backend.register_mem_pool_host(make_pool())
    try:
        good = make_keys(2)
        assert backend.batch_set_v1(good, torch.arange(0, 2 * backend.mem_pool_host.page_size)) == [True, True]
        for keys in ([good[0], 7], [7, good[0]], [good[0], None], [good[0], b"bytes"], [good[0], good[1] + "\n"]):
            with pytest.raises(InvalidKeyError):
                backend.batch_exists_each(keys)
            with pytest.raises(InvalidKeyError):
                backend.batch_exists(keys)
        assert backend.batch_exists_each(good) == [True, True]
    finally:
        backend.clear()
        backend.close()


HOSTILE = ["../../etc/passwd", "a/b", "", "a\x00b", "key\n", "*", "{tag}", "ü", ".hidden", "a" * 257, None, 7, b"x"]


@pytest.mark.services
def test_hostile_keys_never_reach_mooncake(services: PrivateServices) -> None:
    backend = open_mooncake(services, "bad")
    pool = backend.mem_pool_host
    try:
        one = torch.arange(0, pool.page_size)
        for key in HOSTILE:
            for call in (
                lambda k=key: backend.batch_set_v1([make_keys(1)[0], k], torch.arange(0, 2 * pool.page_size)),
                lambda k=key: backend.batch_get_v1([k], one),
                lambda k=key: backend.batch_exists_each([k]),
                lambda k=key: backend.delete([k]),
            ):
                with pytest.raises(InvalidKeyError):
                    call()
        stats = backend.get_stats()
        assert all(row["calls"] == 0 for row in stats["ops"].values()), "a refused call reached the store"
        assert round_trip_ok(backend)
    finally:
        backend.close()
