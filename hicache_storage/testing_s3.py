"""A private moto S3 server that enforces IAM authentication, for credential tests of S3 backends.

Needs ``moto[server]`` and ``boto3`` (imported when used). :class:`AuthS3Server` starts
``moto_server`` on a spare 127.0.0.1 port, creates a bucket and IAM users with known policies, and
from then on refuses every request not signed by a known key that its policy allows.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .testing import PAGE_SIZE, page_indices

__all__ = [
    "REFUSED_CASES",
    "AuthS3Server",
    "IamKey",
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
