"""The s3 backend: one object per page (record header + payload), written with one PUT.

An S3 PUT is atomic (the object becomes visible only once complete), so ``exists`` (a HEAD that
also checks the object's size) never sees a partial page. Reads GET the object and stream it
straight into the page segments (``readinto``), then verify the record (magic, length, the digest
of the storage key it was written under, XXH3-64, and with a secret its tag). Batches run on a
bounded thread pool of ``max_workers``; each key is one request.

Every request of a page call gets what is left of the call's resilience deadline as its connect and
read timeout, and each read of a response body re-arms the socket with what is left, so a killed,
hung or slow endpoint never keeps a call past its deadline; a request that would start after it is
not sent.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import xxhash
from botocore.exceptions import ClientError, NoCredentialsError
from urllib3.util import Timeout

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendSetup,
    BatchContext,
    ConfigError,
    PageBuffers,
    StoredPage,
    current_deadline,
    deadline_scope,
)
from hicache_storage.plugin.page_format import HEADER_SIZE, PageRecordError, record_codec

from .client import NOT_FOUND_CODES, make_client, not_found
from .options import S3Options
from .raw_baseline import RawS3

__all__ = ["S3Backend"]

log = logging.getLogger(__name__)

_DELETE_BATCH = 1000


class S3Backend(Backend[S3Options]):
    """Pages as S3 objects below ``s3://<bucket>/<prefix>/`` (see :class:`S3Options`).

    Construction checks that the bucket exists (``check_bucket``): a missing bucket or refused
    credentials raise :class:`ConfigError`; an unreachable endpoint does not (the engine may start
    before the storage service), later calls are then misses / ``False``. ``client`` (boto3),
    ``bucket``, ``root`` and :meth:`object_key` locate the stored objects.
    """

    Options = S3Options
    #: boto3 calls under ``<prefix>/raw-baseline/`` for ``hicache-storage bench`` to compare with.
    raw_baseline_class = RawS3
    capabilities = SHARED_STORE

    def __init__(self, setup: BackendSetup[S3Options]) -> None:
        options = setup.options
        self.options = options
        self.counters = setup.counters
        self.timeout_s = options.timeout_s or setup.io_timeout_s
        self.bucket = options.bucket
        self.root = options.root
        self._fanout = options.fanout_chars
        self._codec = record_codec(options)
        #: The boto3 S3 client.
        self.client: Any = make_client(options, self.timeout_s)
        _bound_requests_by_deadline(self.client, self.timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=options.max_workers, thread_name_prefix="hicache-s3")
        self._key_pattern = re.compile(
            re.escape(self.root + "/" if self.root else "")
            + (f"[0-9a-f]{{{self._fanout}}}/" if self._fanout else "")
            + r"[A-Za-z0-9][A-Za-z0-9._-]*"
        )
        if options.check_bucket:
            try:
                self._check_bucket()
            except BaseException:  # construction fails: release the client's connections and threads now
                self._pool.shutdown(wait=False)
                self.client.close()
                raise

    # ------------------------------------------------------------ helpers
    def object_key(self, storage_key: str) -> str:
        """The object key holding the page of ``storage_key``."""
        parts = [self.root] if self.root else []
        if self._fanout:
            parts.append(xxhash.xxh3_64_hexdigest(storage_key.encode())[: self._fanout])
        parts.append(storage_key)
        return "/".join(parts)

    def list_object_keys(self) -> list[str]:
        """Keys of every page object under the prefix."""
        paginator = self.client.get_paginator("list_objects_v2")
        listing = paginator.paginate(Bucket=self.bucket, Prefix=self.root + "/" if self.root else "")
        return [
            item["Key"]
            for page in listing
            for item in page.get("Contents", ())
            if self._key_pattern.fullmatch(item["Key"])
        ]

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """One ``ListObjectsV2`` page (sizes and ``LastModified`` from S3); the cursor is its continuation token."""
        root = self.root + "/" if self.root else ""
        request: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": root if self._fanout else root + prefix,
            "MaxKeys": min(limit, 1000),
        }
        if cursor is not None:
            request["ContinuationToken"] = cursor
        response = self.client.list_objects_v2(**request)
        found = []
        for item in response.get("Contents", ()):
            name = item["Key"]
            storage_key = name.rsplit("/", 1)[-1]
            if self._key_pattern.fullmatch(name) and storage_key.startswith(prefix):
                modified = item.get("LastModified")
                found.append(StoredPage(storage_key, int(item["Size"]), modified.timestamp() if modified else None))
        following = response.get("NextContinuationToken") if response.get("IsTruncated") else None
        return found, following

    def _check_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                where = self.options.endpoint_url or "AWS"
                raise ConfigError("extra_config.bucket", f"bucket {self.bucket!r} does not exist at {where}") from None
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                raise ConfigError(
                    "extra_config.aws_access_key_id",
                    f"access to bucket {self.bucket!r} denied ({code}): check the credentials and their permissions",
                ) from None
            raise
        except NoCredentialsError:
            raise ConfigError(
                "extra_config.aws_access_key_id",
                f"no AWS credentials found to access bucket {self.bucket!r} "
                "(set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile, or the options)",
            ) from None
        except Exception as error:  # endpoint down: start anyway, calls become misses
            self.counters.bump("startup_unreachable")
            log.warning("s3 endpoint not reachable at start-up (%s); pages will miss until it is", type(error).__name__)

    def _map(self, work: Callable[[int], bool], count: int) -> list[bool]:
        """Run ``work(i)`` for each index on the pool; faults on some keys are ``False`` for those keys.

        If every key faulted, the first fault is raised so the resilience policy sees an outage.
        Every request runs under the calling thread's deadline; one that would start after it fails.
        """
        deadline = current_deadline()

        def bounded(index: int) -> bool:
            with deadline_scope(deadline):
                if deadline is not None and deadline - time.monotonic() <= 0:
                    raise TimeoutError("the call's deadline passed before this request could start")
                return work(index)

        if count == 1:
            return [bounded(0)]
        futures = [self._pool.submit(bounded, index) for index in range(count)]
        results: list[bool] = []
        errors: list[BaseException] = []
        for future in futures:
            error = future.exception()
            if error is None:
                results.append(future.result())
            else:
                errors.append(error)
                results.append(False)
        if errors:
            if len(errors) == count:
                raise errors[0]
            self.counters.bump("key_faults", len(errors))
        return results

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        def put(index: int) -> bool:
            body = self._codec.record(keys[index], pages[index])
            self.client.put_object(Bucket=self.bucket, Key=self.object_key(keys[index]), Body=body)
            return True

        return self._map(put, len(keys))

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        return self._map(lambda index: self._read_one(keys[index], pages[index], want), len(keys))

    def _read_one(self, key: str, page: PageBuffers, want: int) -> bool:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as error:
            if not_found(error):
                return False
            raise
        body = response["Body"]
        try:
            if int(response.get("ContentLength", -1)) != want:
                return self._integrity_failure()
            header = bytearray(HEADER_SIZE)
            sock = _body_socket(body)
            if not _read_exact(body, memoryview(header), sock) or not all(_read_exact(body, s, sock) for s in page):
                return self._integrity_failure()
            try:
                parsed = self._codec.check_header(header, key, want - HEADER_SIZE)
            except PageRecordError:
                return self._integrity_failure()
            if not self._codec.verify(parsed, key, page):
                return self._integrity_failure()
            return True
        finally:
            body.close()

    def _integrity_failure(self) -> bool:
        self.counters.bump("integrity_failures")
        return False

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes

        def head(index: int) -> bool:
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=self.object_key(keys[index]))
            except ClientError as error:
                if not_found(error):
                    return False
                raise
            return int(response.get("ContentLength", -1)) == want

        return self._map(head, len(keys))

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        names = [self.object_key(key) for key in keys]
        failed: set[str] = set()
        for begin in range(0, len(names), _DELETE_BATCH):
            failed |= self._delete_objects(names[begin : begin + _DELETE_BATCH])
        return [name not in failed for name in names]

    def _delete_objects(self, names: list[str]) -> set[str]:
        response = self.client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": [{"Key": name} for name in names], "Quiet": True}
        )
        return {item["Key"] for item in response.get("Errors", ()) if item.get("Code") not in NOT_FOUND_CODES}

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Delete the page objects of the key spaces ``prefixes`` under the prefix (``None``: of every key
        space); objects not shaped like pages are kept."""
        names = self.list_object_keys()
        if prefixes is not None:
            starts = tuple(prefixes)
            names = [name for name in names if name.rsplit("/", 1)[-1].startswith(starts)]
        for begin in range(0, len(names), _DELETE_BATCH):
            failed = self._delete_objects(names[begin : begin + _DELETE_BATCH])
            if failed:
                raise OSError(f"could not delete {len(failed)} objects from bucket {self.bucket!r}")

    def release(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()

    def __repr__(self) -> str:
        return f"<S3Backend {self.options!r}>"


def _bound_requests_by_deadline(client: Any, cap: float) -> None:
    """Give every request of ``client`` what is left of the calling thread's deadline as its connect and
    read timeout (at most ``cap``); without a deadline the client's own timeouts apply."""
    session = getattr(getattr(client, "_endpoint", None), "http_session", None)
    original = getattr(session, "_get_request_timeout", None)
    if session is None or original is None:  # another botocore: the client's fixed timeouts apply
        log.debug("botocore has no per-request timeout hook; S3 calls use the client's timeouts")
        return

    def budgeted(request: Any) -> Any:
        deadline = current_deadline()
        if deadline is None:
            return original(request)
        left = max(0.001, min(cap, deadline - time.monotonic()))
        return Timeout(connect=left, read=left)

    session._get_request_timeout = budgeted


def _body_socket(body: Any) -> Any:
    """The socket a streamed response body is read from (``None`` when it cannot be found)."""
    raw = getattr(body, "_raw_stream", None)
    connection = getattr(raw, "connection", None) or getattr(raw, "_connection", None)
    return getattr(connection, "sock", None)


def _read_exact(body: Any, target: memoryview, sock: Any = None) -> bool:
    """Fill ``target`` from ``body``; ``False`` if the stream ends first.

    Under a call deadline, each read first gives ``sock`` (the body's socket) what is left of it,
    and a read that would start after the deadline raises :class:`TimeoutError`.
    """
    view = target.cast("B") if target.format != "B" else target
    filled = 0
    size = view.nbytes
    deadline = current_deadline()
    while filled < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the call's deadline passed while the object was being received")
            if sock is not None:
                sock.settimeout(left)
        count = body.readinto(view[filled:])
        if not count:
            return False
        filled += count
    return True
