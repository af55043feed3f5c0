"""Security: hostile keys never reach storage, owner-only files, Redis AUTH/TLS, no leaked secrets,
and tenants kept apart."""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rel_support import HOST, PrivateServices, free_ports, make_keys, make_pool, round_trip_ok

from hicache_storage import HiCacheStorage, InvalidKeyError, load_backend, make_config, page_hashes
from hicache_storage.testing.tls_certs import make_certs

pytestmark = pytest.mark.timeout(90)

HOSTILE_KEYS = [
    "../../../../etc/passwd",
    "..",
    ".",
    "/abs/path",
    "a/b",
    "a\\b",
    "",
    "a\x00b",
    "a b",
    "key\n",
    "*",
    "a*b",
    "a?b",
    "{tag}",
    "hc1-x:y",
    "ü",
    ".hidden",
    "-dash",
    "%2e%2e%2f",
    "a" * 257,
]
SAFE_STORAGE_KEY = re.compile(r"hc1-[0-9a-f]{20}\.[0-9a-f]{64}\.tp0of1\.pp0of1\.cp0of1")
PASSWORD = "pw-" + secrets.token_hex(12)
SECRET_KEY = "sk-" + secrets.token_hex(16)


# --------------------------------------------------------------------------- backends under test
@pytest.fixture
def redis_server(services: PrivateServices) -> str:
    services.ctl("start", "redis")
    return services.redis_url


def _file(tmp_path: Path, **extra: Any) -> HiCacheStorage:
    from hicache_storage_file import FileBackend

    return load_backend(FileBackend, make_config("m", extra_config={"path": str(tmp_path / "store"), **extra}))


def _hostile_calls(backend: HiCacheStorage, key: Any) -> list[Callable[[], Any]]:
    pool = backend.mem_pool_host
    idx = torch.arange(0, pool.page_size, dtype=torch.int64)
    flat = pool.get_dummy_flat_data_page()
    return [
        lambda: backend.batch_set_v1([make_keys(1)[0], key], torch.arange(0, 2 * pool.page_size)),
        lambda: backend.batch_get_v1([key], idx),
        lambda: backend.batch_exists([key]),
        lambda: backend.exists(key),
        lambda: backend.set(key, flat),
        lambda: backend.batch_set([key], [flat]),
        lambda: backend.get(key),
        lambda: backend.delete([key]),
    ]


def check_hostile_keys(backend: HiCacheStorage, listing: Callable[[], set[str]]) -> None:
    """Every hostile key is refused with a ValueError before any I/O; nothing lands in storage."""
    backend.register_mem_pool_host(make_pool())
    before = listing()
    for key in [*HOSTILE_KEYS, None, 7, b"bytes"]:
        for call in _hostile_calls(backend, key):
            with pytest.raises(InvalidKeyError):
                call()
    assert listing() == before, "a refused call wrote something"
    good = make_keys(2)
    assert backend.batch_set_v1(good, torch.arange(0, 2 * backend.mem_pool_host.page_size)) == [True, True]
    landed = listing() - before
    pages = {name for name in landed if "._manifest." not in name}  # the key space's manifest lands beside them
    assert len(pages) == 2 and len(landed - pages) <= 1
    for name in pages:
        assert SAFE_STORAGE_KEY.fullmatch(name), f"unexpected storage name {name!r}"


def test_hostile_keys_file(tmp_path: Path) -> None:
    backend = _file(tmp_path)
    outside_before = set(os.listdir(tmp_path))

    def listing() -> set[str]:
        return {p.name for p in (tmp_path / "store").rglob("*") if p.is_file()}

    check_hostile_keys(backend, listing)
    assert set(os.listdir(tmp_path)) == outside_before, "something was written outside the storage root"
    backend.close()


@pytest.mark.services
def test_hostile_keys_redis(redis_server: str) -> None:
    import redis
    from hicache_storage_redis import RedisBackend

    backend = load_backend(RedisBackend, make_config("m", extra_config={"url": redis_server, "key_prefix": "hk:"}))
    raw = redis.Redis.from_url(redis_server)

    def listing() -> set[str]:
        keys = {k.decode() for k in raw.keys("*")}
        assert all(k.startswith("hk:") for k in keys), keys
        return {k.removeprefix("hk:") for k in keys}

    try:
        check_hostile_keys(backend, listing)
    finally:
        backend.clear()
        backend.close()
        raw.close()


@pytest.mark.services
def test_hostile_keys_s3(services: PrivateServices) -> None:
    import boto3
    from hicache_storage_s3 import S3Backend

    services.ctl("start", "s3")
    bucket = f"sec-{secrets.token_hex(4)}"
    client = boto3.client(
        "s3",
        endpoint_url=services.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIAX",
        aws_secret_access_key=SECRET_KEY,
    )
    client.create_bucket(Bucket=bucket)
    extra = {
        "bucket": bucket,
        "endpoint_url": services.s3_endpoint,
        "region": "us-east-1",
        "prefix": "cache",
        "aws_access_key_id": "AKIAX",
        "aws_secret_access_key": SECRET_KEY,
    }
    backend = load_backend(S3Backend, make_config("m", extra_config=extra))

    def listing() -> set[str]:
        names = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert all(re.fullmatch(r"cache/[0-9a-f]{2}/[^/]+", n) for n in names), names
        return {n.rsplit("/", 1)[1] for n in names}

    try:
        check_hostile_keys(backend, listing)
    finally:
        backend.close()
        client.close()


def test_hostile_keys_fsspec(tmp_path: Path) -> None:
    pytest.importorskip("hicache_storage_fsspec")
    from hicache_storage_fsspec import FsspecBackend

    root = tmp_path / "fs"
    backend = load_backend(FsspecBackend, make_config("m", extra_config={"url": f"file://{root}"}))

    def listing() -> set[str]:
        return {p.name for p in root.rglob("*") if p.is_file()} if root.exists() else set()

    check_hostile_keys(backend, listing)
    assert {p.name for p in tmp_path.iterdir()} <= {"fs"}
    backend.close()


# --------------------------------------------------------------------------- file permissions
def test_file_backend_owner_only_permissions(tmp_path: Path) -> None:
    old = os.umask(0)  # even with a permissive umask
    try:
        backend = _file(tmp_path, fanout_levels=2)
        backend.register_mem_pool_host(make_pool())
        assert all(backend.batch_set_v1(make_keys(4), torch.arange(0, 16)))
        backend.close()
    finally:
        os.umask(old)
    root = tmp_path / "store"
    entries = [root, *root.rglob("*")]
    assert len(entries) > 4
    for path in entries:
        mode = stat.S_IMODE(path.stat().st_mode)
        want = 0o700 if path.is_dir() else 0o600
        assert mode == want, f"{path} has mode {oct(mode)}, expected {oct(want)}"


# --------------------------------------------------------------------------- redis AUTH + TLS
@pytest.fixture(scope="module")
def tls_redis() -> Iterator[dict[str, Any]]:
    """A redis-server speaking only TLS on a spare loopback port, with a password and an ACL user."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    directory = Path(tempfile.mkdtemp(prefix="hc-rel-tls-"))
    ca, cert, key = make_certs(directory)[:3]
    port = free_ports(1)[0]
    process = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            HOST,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(cert),
            "--tls-key-file",
            str(key),
            "--tls-ca-cert-file",
            str(ca),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
            "--user",
            "cacheuser",
            "on",
            f">{PASSWORD}u",
            "~*",
            "+@all",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        probe = redis.Redis(host=HOST, port=port, ssl=True, ssl_ca_certs=str(ca), password=PASSWORD)
        deadline = time.monotonic() + 15
        while True:
            try:
                probe.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.skip("redis-server with TLS did not start")
                time.sleep(0.1)
        probe.close()
        yield {"port": port, "ca": str(ca)}
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(directory, ignore_errors=True)


def _redis_backend(**extra: Any) -> HiCacheStorage:
    from hicache_storage_redis import RedisBackend

    options = {"key_prefix": f"tls{secrets.token_hex(3)}:", "resilience": {"retries": 0, "deadline_s": 2.0}, **extra}
    backend = load_backend(RedisBackend, make_config("m", extra_config=options))
    backend.register_mem_pool_host(make_pool())
    return backend


GOOD_TLS = {
    "url_password": lambda port, ca: {"url": f"rediss://:{PASSWORD}@{HOST}:{port}/0", "ssl_ca_certs": ca},
    "url_acl_user": lambda port, ca: {"url": f"rediss://cacheuser:{PASSWORD}u@{HOST}:{port}/0", "ssl_ca_certs": ca},
    "options_password": lambda port, ca: {
        "host": HOST,
        "port": port,
        "ssl": True,
        "ssl_ca_certs": ca,
        "password": PASSWORD,
    },
    "options_acl_user": lambda port, ca: {
        "host": HOST,
        "port": port,
        "ssl": True,
        "ssl_ca_certs": ca,
        "username": "cacheuser",
        "password": PASSWORD + "u",
    },
}
BAD_TLS = {
    "wrong_password": lambda port, ca: {
        "host": HOST,
        "port": port,
        "ssl": True,
        "ssl_ca_certs": ca,
        "password": "wrong-" + PASSWORD,
    },
    "no_password": lambda port, ca: {"host": HOST, "port": port, "ssl": True, "ssl_ca_certs": ca},
    "untrusted_certificate": lambda port, ca: {"host": HOST, "port": port, "ssl": True, "password": PASSWORD},
    "plain_text_to_tls_port": lambda port, ca: {"host": HOST, "port": port, "password": PASSWORD},
}


@pytest.mark.parametrize("case", sorted(GOOD_TLS))
def test_redis_tls_and_auth_accepted(tls_redis: dict[str, Any], case: str) -> None:
    backend = _redis_backend(**GOOD_TLS[case](tls_redis["port"], tls_redis["ca"]))
    try:
        ok = round_trip_ok(backend)
        fault = str(backend.get_stats()["last_fault"])
        assert ok, f"TLS+AUTH round trip failed ({case}): {fault}"
    finally:
        backend.clear()
        backend.close()


@pytest.mark.parametrize("case", sorted(BAD_TLS))
def test_redis_tls_and_auth_refused(tls_redis: dict[str, Any], case: str) -> None:
    backend = _redis_backend(**BAD_TLS[case](tls_redis["port"], tls_redis["ca"]))
    try:
        assert not round_trip_ok(backend), f"expected a refusal ({case})"
        stats = backend.get_stats()
        assert stats["faults"] > 0
        assert PASSWORD not in str(stats) and PASSWORD not in repr(backend)
    finally:
        backend.close()


# --------------------------------------------------------------------------- secrets in logs/errors/repr
def _assert_secret_absent(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text, f"secret leaked in: {text[:300]}"


def test_redis_credentials_never_leak(caplog: pytest.LogCaptureFixture, tls_redis: dict[str, Any]) -> None:
    from hicache_storage import ConfigError

    caplog.set_level(logging.DEBUG)
    dead_port = free_ports(1)[0]
    texts: list[str] = []
    for options in (
        {"url": f"redis://user:{PASSWORD}@{HOST}:{dead_port}/0"},
        {"host": HOST, "port": dead_port, "password": PASSWORD},
        {
            "host": HOST,
            "port": tls_redis["port"],
            "ssl": True,
            "ssl_ca_certs": tls_redis["ca"],
            "password": PASSWORD + "x",
        },
    ):
        backend = _redis_backend(**options)
        assert not round_trip_ok(backend)
        texts += [repr(backend), str(backend), repr(backend.options), str(backend.get_stats())]
        backend.close()
    for options in (
        {"url": f"redis://u:{PASSWORD}@{HOST}:99999/0"},
        {"url": f"http://u:{PASSWORD}@x/"},
        {"password": 5},
    ):
        with pytest.raises(ConfigError) as caught:
            _redis_backend(**options)
        texts.append(str(caught.value))
    texts.append(caplog.text)
    _assert_secret_absent(PASSWORD, *texts)


@pytest.mark.services
def test_s3_credentials_never_leak(caplog: pytest.LogCaptureFixture) -> None:
    from hicache_storage_s3 import S3Backend

    from hicache_storage import ConfigError

    caplog.set_level(logging.DEBUG)
    token = "st-" + secrets.token_hex(16)
    dead = f"http://{HOST}:{free_ports(1)[0]}"
    extra = {
        "bucket": "no-such-bucket",
        "endpoint_url": dead,
        "region": "us-east-1",
        "aws_access_key_id": "AKIASECRETLEAKTEST",
        "aws_secret_access_key": SECRET_KEY,
        "aws_session_token": token,
        "resilience": {"retries": 0, "deadline_s": 1.0},
    }
    backend = load_backend(S3Backend, make_config("m", extra_config=extra))
    backend.register_mem_pool_host(make_pool())
    assert not round_trip_ok(backend)
    texts = [repr(backend), str(backend), repr(backend.options), str(backend.get_stats())]
    backend.close()
    with pytest.raises(ConfigError) as caught:
        load_backend(S3Backend, make_config("m", extra_config={**extra, "aws_secret_access_key": 12345}))
    texts.append(str(caught.value))
    texts.append(caplog.text)
    _assert_secret_absent(SECRET_KEY, *texts)
    _assert_secret_absent(token, *texts)


# --------------------------------------------------------------------------- tenants
def test_tenant_isolation(tmp_path: Path) -> None:
    prompt = list(range(1000, 1000 + 8 * 4))
    chains = {ns: page_hashes(prompt, 4, namespace=ns) for ns in ("tenant-a", "tenant-b")}
    plain = page_hashes(prompt, 4)
    assert not set(chains["tenant-a"]) & set(chains["tenant-b"])
    assert not set(plain) & (set(chains["tenant-a"]) | set(chains["tenant-b"]))
    assert page_hashes(prompt, 4, namespace="tenant-a") == chains["tenant-a"]  # deterministic per tenant

    def backend_for(namespace: str) -> HiCacheStorage:
        backend = _file(tmp_path, namespace=namespace)
        backend.register_mem_pool_host(make_pool())
        return backend

    a1, a2, b = backend_for("tenant-a"), backend_for("tenant-a"), backend_for("tenant-b")
    idx = torch.arange(0, 8 * 4)
    assert all(a1.batch_set_v1(chains["tenant-a"], idx))
    # same namespace (another process of the same tenant) shares every page
    assert a2.batch_exists(chains["tenant-a"]) == 8
    # the other tenant with the identical prompt finds nothing: its chain differs ...
    assert b.batch_exists(chains["tenant-b"]) == 0
    # ... and even the first tenant's bare hashes map to other storage keys in its key space
    assert b.batch_exists(chains["tenant-a"]) == 0
    assert b.batch_get_v1(chains["tenant-a"], idx) == [False] * 8
    assert a1.keyspace is not None and b.keyspace is not None
    assert a1.keyspace.storage_key(plain[0]) != b.keyspace.storage_key(plain[0])
    for backend in (a1, a2, b):
        backend.close()
