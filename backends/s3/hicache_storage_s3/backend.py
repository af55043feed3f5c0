"""The s3 backend: one object per page (record header + payload), written with one PUT.

An S3 PUT is atomic (the object becomes visible only once complete), so ``exists`` (a HEAD that
also checks the object's size) never sees a partial page. Reads GET the object and stream it
straight into the page segments (``readinto``), then verify the record (magic, length, XXH3-64).
Batches run on a bounded thread pool of ``max_workers``; each key is one request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, TypeVar

import boto3
import xxhash
from botocore.config import Config
from botocore.exceptions import ClientError, NoCredentialsError

from hicache_storage import Capabilities, ConfigError, HiCacheStorage, HiCacheStorageConfig
from hicache_storage.batch_context import BatchContext
from hicache_storage.page_format import HEADER_SIZE, PageRecordError, checksum, encode_record, parse_header

from .options import S3Options, check_secret_types
from .raw_baseline import RawS3
from .raw_store import S3RawStore
from .redaction import protect_secrets

__all__ = ["DEFAULT_TIMEOUT_S", "S3Backend"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: I/O timeout when neither ``timeout_s`` nor a resilience deadline is configured.
DEFAULT_TIMEOUT_S = HiCacheStorage.DEFAULT_IO_TIMEOUT_S
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
_DELETE_BATCH = 1000


class S3Backend(HiCacheStorage):
    """Pages as S3 objects below ``s3://<bucket>/<prefix>/`` (see :class:`S3Options`).

    Construction checks that the bucket exists (``check_bucket``): a missing bucket or refused
    credentials raise :class:`ConfigError`; an unreachable endpoint does not (the engine may start
    before the storage service), later calls are then misses / ``False``.
    """

    Options: ClassVar[type[Any]] = S3Options
    capabilities = Capabilities(
        persistent=True,
        shared=True,
        supports_delete=True,
        supports_clear=True,
        verifies_integrity=True,
    )

    @staticmethod
    def raw_baseline(config: HiCacheStorageConfig) -> RawS3:
        """boto3 calls under ``<prefix>/raw-baseline/`` for ``hicache-storage bench`` to compare with."""
        return RawS3.from_config(config)

    def __init__(self, config: HiCacheStorageConfig) -> None:
        check_secret_types(dict(getattr(config, "extra_config", None) or {}))
        super().__init__(config)
        options: S3Options = self.options
        self.timeout_s = options.timeout_s or self.io_timeout_s
        self.bucket = options.bucket
        self.root = options.root
        self._fanout = options.fanout_chars
        self._client = _make_client(options, self.timeout_s)
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
                self._client.close()
                raise

    # ------------------------------------------------------------ helpers
    @property
    def client(self) -> Any:
        """The boto3 S3 client."""
        return self._client

    def object_key(self, storage_key: str) -> str:
        """The object key holding the page of ``storage_key``."""
        parts = [self.root] if self.root else []
        if self._fanout:
            parts.append(xxhash.xxh3_64_hexdigest(storage_key.encode())[: self._fanout])
        parts.append(storage_key)
        return "/".join(parts)

    def raw_store(self) -> S3RawStore:
        """Mapping storage key → stored record bytes, behind the backend's back."""
        return S3RawStore(self._client, self.bucket, self.object_key, self.list_object_keys)

    def list_object_keys(self) -> list[str]:
        """Keys of every page object under the prefix."""
        paginator = self._client.get_paginator("list_objects_v2")
        listing = paginator.paginate(Bucket=self.bucket, Prefix=self.root + "/" if self.root else "")
        return [
            item["Key"]
            for page in listing
            for item in page.get("Contents", ())
            if self._key_pattern.fullmatch(item["Key"])
        ]

    def _check_bucket(self) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
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
            self.stats.bump("startup_unreachable")
            log.warning("s3 endpoint not reachable at start-up (%s); pages will miss until it is", type(error).__name__)

    def _map(self, work: Callable[[int], bool], count: int) -> list[bool]:
        """Run ``work(i)`` for each index on the pool; faults on some keys are ``False`` for those keys.

        If every key faulted, the first fault is raised so the resilience policy sees an outage.
        """
        if count == 1:
            return [work(0)]
        futures = [self._pool.submit(work, index) for index in range(count)]
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
            self.stats.bump("key_faults", len(errors))
        return results

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        def put(index: int) -> bool:
            body = encode_record(pages[index])
            self._client.put_object(Bucket=self.bucket, Key=self.object_key(keys[index]), Body=body)
            return True

        return self._map(put, len(keys))

    def read_pages(self, keys: Sequence[str], pages: Sequence[list[memoryview]], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        return self._map(lambda index: self._read_one(keys[index], pages[index], want), len(keys))

    def _read_one(self, key: str, page: list[memoryview], want: int) -> bool:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self.object_key(key))
        except ClientError as error:
            if _not_found(error):
                return False
            raise
        body = response["Body"]
        try:
            if int(response.get("ContentLength", -1)) != want:
                return self._integrity_failure()
            header = bytearray(HEADER_SIZE)
            if not _read_exact(body, memoryview(header)) or not all(_read_exact(body, s) for s in page):
                return self._integrity_failure()
            try:
                _length, digest = parse_header(header, want - HEADER_SIZE)
            except PageRecordError:
                return self._integrity_failure()
            if checksum(page) != digest:
                return self._integrity_failure()
            return True
        finally:
            body.close()

    def _integrity_failure(self) -> bool:
        self.stats.bump("integrity_failures")
        return False

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes

        def head(index: int) -> bool:
            try:
                response = self._client.head_object(Bucket=self.bucket, Key=self.object_key(keys[index]))
            except ClientError as error:
                if _not_found(error):
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
        response = self._client.delete_objects(
            Bucket=self.bucket, Delete={"Objects": [{"Key": name} for name in names], "Quiet": True}
        )
        return {item["Key"] for item in response.get("Errors", ()) if item.get("Code") not in _NOT_FOUND}

    def clear_pages(self) -> None:
        """Delete every page object under the prefix (objects not shaped like pages are kept)."""
        names = self.list_object_keys()
        for begin in range(0, len(names), _DELETE_BATCH):
            failed = self._delete_objects(names[begin : begin + _DELETE_BATCH])
            if failed:
                raise OSError(f"could not delete {len(failed)} objects from bucket {self.bucket!r}")

    def release(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()

    def __repr__(self) -> str:
        return f"<S3Backend {self.options!r} closed={self.closed}>"


def _make_client(options: S3Options, timeout_s: float) -> Any:
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
    credentials = session.get_credentials()
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    protect_secrets(
        options.aws_secret_access_key,
        options.aws_session_token,
        frozen.secret_key if frozen else None,
        frozen.token if frozen else None,
    )
    return client


def _not_found(error: ClientError) -> bool:
    return str(error.response.get("Error", {}).get("Code", "")) in _NOT_FOUND


def _read_exact(body: Any, target: memoryview) -> bool:
    """Fill ``target`` from ``body``; ``False`` if the stream ends first."""
    view = target.cast("B") if target.format != "B" else target
    filled = 0
    size = view.nbytes
    while filled < size:
        count = body.readinto(view[filled:])
        if not count:
            return False
        filled += count
    return True
