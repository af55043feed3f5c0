"""A private moto S3 server that enforces IAM authentication, for credential tests of S3 backends.

Needs ``pytest``, ``moto[server]`` and ``boto3`` (the last two imported when used).
:class:`AuthS3Server` starts ``moto_server`` on a spare 127.0.0.1 port, creates a bucket and IAM
users with known policies, and from then on refuses every request not signed by a known key that
its policy allows. :class:`S3CredentialChecks` is the credential test class any backend over an S3
bucket subclasses.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from ..config import make_config
from ..contract import HiCacheStorage
from ..errors import ConfigError
from ..plugin.backend import Backend
from . import PAGE_SIZE, make_backend, make_pool, page_bytes, page_indices, random_keys

__all__ = [
    "REFUSED_CASES",
    "AuthS3Server",
    "IamKey",
    "S3CredentialChecks",
    "assert_calls_miss",
    "assert_hidden",
    "assert_not_logged",
    "refused_key",
]

#: The ways :func:`refused_key` makes credentials the server refuses.
REFUSED_CASES = ("unknown_key", "wrong_secret", "no_permission")


@dataclass(frozen=True)
class IamKey:
    """An IAM user's access key pair."""

    access_key_id: str
    secret_access_key: str


class AuthS3Server:
    """A moto server of its own on a spare 127.0.0.1 port that enforces IAM authentication.

    moto serves its first ``INITIAL_NO_AUTH_ACTION_COUNT`` requests without checking them; this
    class spends exactly those on creating ``bucket`` and three IAM users: ``writer`` (``s3:*`` on
    the bucket), ``outsider`` (no permission at all) and ``admin`` (``iam:*``, to revoke keys).
    Every later request must be signed by a known key whose policy allows it. ``close()`` kills
    the server.
    """

    REGION = "us-east-1"
    SETUP_REQUESTS = 10  # create_bucket + 3 x (create_user, create_access_key) + 3 x put_user_policy

    def __init__(self, bucket: str, start_timeout_s: float = 20.0) -> None:
        binary = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
        if binary is None:
            raise FileNotFoundError("moto_server not found (pip install 'moto[server]')")
        self.bucket = bucket
        self._log = tempfile.NamedTemporaryFile(prefix="hc-moto-auth-", suffix=".log", delete=False)  # noqa: SIM115
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(self.SETUP_REQUESTS)}
        self._process = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(self.port)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            self._wait_ready(start_timeout_s)
            self.writer, self.outsider, self.admin = self._set_up()
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self._process.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        raise TimeoutError(f"moto_server not listening on port {self.port} after {timeout_s} s:\n{self.log_tail()}")

    def client(self, service: str, key: IamKey | None = None) -> Any:
        """A boto3 client of this server, signing with ``key`` (``None``: a key nobody owns)."""
        key = key or IamKey("AKIANOBODYOWNSTHIS00", "unknown-secret-" + secrets.token_hex(12))
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.REGION,
            aws_access_key_id=key.access_key_id,
            aws_secret_access_key=key.secret_access_key,
        )

    def _set_up(self) -> tuple[IamKey, IamKey, IamKey]:
        iam, s3 = self.client("iam"), self.client("s3")
        s3.create_bucket(Bucket=self.bucket)
        keys = []
        for name in ("writer", "outsider", "admin"):
            iam.create_user(UserName=name)
            made = iam.create_access_key(UserName=name)["AccessKey"]
            keys.append(IamKey(made["AccessKeyId"], made["SecretAccessKey"]))
        arns = [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"]
        self._allow(iam, "writer", ["s3:*"], arns)
        self._allow(iam, "outsider", ["sqs:ListQueues"], ["*"])
        self._allow(iam, "admin", ["iam:*"], ["*"])
        try:  # the allowance is spent: an unknown key must now be refused
            s3.head_bucket(Bucket=self.bucket)
        except Exception:
            return keys[0], keys[1], keys[2]
        raise RuntimeError("moto_server does not enforce authentication after the set-up requests")

    @staticmethod
    def _allow(iam: Any, user: str, actions: list[str], resources: list[str]) -> None:
        statement = {"Effect": "Allow", "Action": actions, "Resource": resources}
        document = json.dumps({"Version": "2012-10-17", "Statement": [statement]})
        iam.put_user_policy(UserName=user, PolicyName=f"{user}-policy", PolicyDocument=document)

    def new_writer(self, name: str) -> IamKey:
        """A new user allowed ``s3:*`` on the bucket (created through ``admin``)."""
        iam = self.client("iam", self.admin)
        iam.create_user(UserName=name)
        made = iam.create_access_key(UserName=name)["AccessKey"]
        self._allow(iam, name, ["s3:*"], [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"])
        return IamKey(made["AccessKeyId"], made["SecretAccessKey"])

    def revoke(self, name: str, key: IamKey) -> None:
        """Delete ``key`` of user ``name`` (through ``admin``)."""
        iam = self.client("iam", self.admin)
        iam.delete_access_key(UserName=name, AccessKeyId=key.access_key_id)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's output."""
        return Path(self._log.name).read_text(errors="replace")[-chars:]

    def close(self) -> None:
        """Kill the server and remove its log."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)


# ------------------------------------------------------------------------------ checks for tests
def refused_key(server: AuthS3Server, case: str) -> IamKey:
    """Credentials ``server`` refuses: an unknown key, the writer's key with a wrong secret, or the outsider's."""
    token = secrets.token_hex(12)
    if case == "unknown_key":
        return IamKey("AKIA" + secrets.token_hex(8).upper(), f"secret-of-nobody-{token}")
    if case == "wrong_secret":
        return IamKey(server.writer.access_key_id, f"wrong-secret-{token}")
    if case == "no_permission":
        return server.outsider
    raise ValueError(f"unknown case {case!r}; expected one of {REFUSED_CASES}")


def assert_hidden(key: IamKey, *texts: str) -> None:
    """Neither the secret nor the access key id of ``key`` appears in any of ``texts``."""
    for text in texts:
        assert key.secret_access_key not in text
        assert key.access_key_id not in text


def assert_not_logged(caplog: Any, secret: str) -> None:
    """No record captured by pytest's ``caplog`` (botocore's among them, which must be there) holds ``secret``."""
    assert any(record.name.startswith("botocore") for record in caplog.records), "botocore records not captured"
    assert [record.name for record in caplog.records if secret in record.getMessage()] == []
    assert secret not in caplog.text


def assert_calls_miss(backend: Any, pool: Any, keys: list[str]) -> None:
    """Every batch call of ``backend`` returns misses / ``False`` (an exception fails the caller) and counts a fault."""
    count = len(keys)
    assert backend.batch_exists(keys) == 0
    assert backend.batch_exists_each(keys) == [False] * count
    assert backend.batch_get_v1(keys, page_indices(8, count)) == [False] * count
    assert backend.batch_set_v1(keys, page_indices(0, count)) == [False] * count
    assert backend.batch_get(keys) == [None] * count
    assert backend.batch_set(keys, [pool.get_data_page(p * PAGE_SIZE) for p in range(count)]) is False
    assert backend.stats.total_faults() > 0


# ------------------------------------------------------------------------------ the test class
class S3CredentialChecks:
    """Credential tests of a backend over an S3 bucket, against its own :class:`AuthS3Server`.

    Subclass it as ``TestSomething`` and set :attr:`backend_class`, :attr:`credential_option` and
    :meth:`options`. Checked: valid keys round-trip byte-exact; an unknown key, a wrong secret, a
    user without permission or no credentials at all is a :class:`ConfigError` naming the bucket
    and the credential option at construction; with the bucket check off, or a key revoked while
    running, every call misses (never raises) and counts a fault; no secret ever shows in an
    error, a repr, the stats or a log record (botocore's DEBUG records included).
    """

    #: The backend under test.
    backend_class: ClassVar[type[Backend[Any]]]
    #: What ``ConfigError.option`` names when the server refuses the credentials.
    credential_option: ClassVar[str]

    def options(
        self, server: AuthS3Server, key: IamKey | None, root: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        """``extra_config`` storing under ``root`` (a fresh one when ``None``) of ``server``'s bucket,
        signing with ``key`` (``None``: no credentials given), plus ``extra`` (``check_bucket``)."""
        raise NotImplementedError

    def root_of(self, backend: Any) -> str:
        """The ``root`` argument of :meth:`options` that reaches ``backend``'s pages."""
        raise NotImplementedError

    @pytest.fixture(scope="class")
    def server(self) -> Iterator[AuthS3Server]:
        try:
            running = AuthS3Server(f"hc-auth-{secrets.token_hex(4)}")
        except FileNotFoundError as error:
            pytest.skip(str(error))
        yield running
        running.close()

    def test_valid_keys_round_trip_is_byte_exact(self, server: AuthS3Server, caplog: Any) -> None:
        caplog.set_level(logging.DEBUG)
        pool = make_pool()
        backend = make_backend(self.backend_class, self.options(server, server.writer), pool)
        keys = random_keys(4)
        written = [page_bytes(pool, p) for p in range(4)]
        try:
            assert backend.batch_set_v1(keys, page_indices(0, 4)) == [True] * 4
            assert backend.batch_exists(keys) == 4
            assert backend.batch_get_v1(keys, page_indices(8, 4)) == [True] * 4
            assert [page_bytes(pool, p) for p in range(8, 12)] == written
            got = backend.batch_get(keys[:1])
            assert got[0] is not None and bytes(got[0].view(torch.uint8).numpy()) == written[0]
            assert_hidden(server.writer, repr(backend), repr(backend.backend), str(backend.get_stats()))
        finally:
            backend.clear()
            backend.close()
        assert_not_logged(caplog, server.writer.secret_access_key)

    @pytest.mark.parametrize("case", REFUSED_CASES)
    def test_refused_credentials_are_a_config_error_naming_the_bucket(
        self, server: AuthS3Server, caplog: Any, case: str
    ) -> None:
        caplog.set_level(logging.DEBUG)
        key = refused_key(server, case)
        with pytest.raises(ConfigError) as caught:
            HiCacheStorage(self.backend_class, make_config("m", extra_config=self.options(server, key)))
        error = caught.value
        assert error.option == self.credential_option
        assert repr(server.bucket) in str(error)
        assert "credentials" in str(error) and "permissions" in str(error)
        assert_hidden(key, str(error), repr(error))
        assert_not_logged(caplog, key.secret_access_key)

    def test_no_credentials_at_all_is_a_config_error(self, server: AuthS3Server, monkeypatch: Any) -> None:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/config")
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        with pytest.raises(ConfigError) as caught:
            HiCacheStorage(self.backend_class, make_config("m", extra_config=self.options(server, None)))
        assert caught.value.option == self.credential_option
        assert repr(server.bucket) in str(caught.value) and "credentials" in str(caught.value)

    @pytest.mark.parametrize("case", REFUSED_CASES)
    def test_refused_credentials_without_the_check_give_misses(
        self, server: AuthS3Server, caplog: Any, case: str
    ) -> None:
        caplog.set_level(logging.DEBUG)
        pool = make_pool()
        writer = make_backend(self.backend_class, self.options(server, server.writer), pool)
        keys = random_keys(2)
        assert writer.batch_set_v1(keys, page_indices(0, 2)) == [True, True]  # stored, yet not readable with `key`
        key = refused_key(server, case)
        options = self.options(server, key, self.root_of(writer), check_bucket=False)
        backend = make_backend(self.backend_class, options, pool)
        try:
            assert_calls_miss(backend, pool, keys)
            assert_hidden(key, repr(backend), repr(backend.backend), str(backend.get_stats()))
            assert writer.batch_exists(keys) == 2
        finally:
            backend.close()
            writer.clear()
            writer.close()
        assert_not_logged(caplog, key.secret_access_key)

    def test_key_revoked_while_running_gives_misses(self, server: AuthS3Server, caplog: Any) -> None:
        key = server.new_writer("rotated")  # before capturing: the IAM reply that creates it holds the secret
        caplog.set_level(logging.DEBUG)
        pool = make_pool()
        backend = make_backend(self.backend_class, self.options(server, key), pool)
        keys = random_keys(2)
        try:
            assert backend.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
            server.revoke("rotated", key)
            assert_calls_miss(backend, pool, keys)
            assert_hidden(key, repr(backend), repr(backend.backend), str(backend.get_stats()))
        finally:
            backend.close()
        assert_not_logged(caplog, key.secret_access_key)
