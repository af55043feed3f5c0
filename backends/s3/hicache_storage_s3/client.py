"""Build the boto3 S3 client from :class:`S3Options`, as the backend and its raw baseline both use it.

The client makes no retries of its own (the SDK's resilience policy retries), has connect and read
timeouts set, a connection pool of ``max_workers``, and sends PUT bodies without waiting for
``100 Continue``; the secrets it was given (or found in boto3's chain) are redacted from AWS logs.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.handlers import add_expect_header

from .options import S3Options
from .redaction import protect_secrets

__all__ = ["NOT_FOUND_CODES", "make_client", "not_found"]

#: Error codes of a missing object (or bucket) in S3 replies.
NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def make_client(options: S3Options, timeout_s: float) -> Any:
    """The boto3 S3 client for ``options`` with connect/read timeout ``timeout_s``."""
    session = boto3.session.Session(
        aws_access_key_id=options.aws_access_key_id,
        aws_secret_access_key=options.aws_secret_access_key,
        aws_session_token=options.aws_session_token,
        region_name=options.region,
        profile_name=options.profile,
    )
    s3_config: dict[str, Any] = {}
    if options.addressing_style is not None:
        s3_config["addressing_style"] = options.addressing_style
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"total_max_attempts": 1},
        max_pool_connections=options.max_workers,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3=s3_config or None,
    )
    client = session.client("s3", endpoint_url=options.endpoint_url, config=config)
    # botocore sends PUT bodies after an ``Expect: 100-continue`` round trip, and waits a fixed second
    # for the 100 when the server is slow or hung: a page is small, send it with the request.
    client.meta.events.unregister("before-call.s3", add_expect_header)
    credentials = session.get_credentials()
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    protect_secrets(
        options.aws_secret_access_key,
        options.aws_session_token,
        frozen.secret_key if frozen else None,
        frozen.token if frozen else None,
    )
    return client


def not_found(error: ClientError) -> bool:
    """Whether ``error`` says the object (or bucket) does not exist."""
    return str(error.response.get("Error", {}).get("Code", "")) in NOT_FOUND_CODES
