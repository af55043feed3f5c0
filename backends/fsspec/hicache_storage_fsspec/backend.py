"""The fsspec backend: one file per page (record header + payload) on any fsspec filesystem.

Pages live at ``<root>/<fan-out>/<storage key>``. On async filesystems (s3fs, gcsfs, http) a
batch runs as concurrent per-page requests on the filesystem's loop, up to ``concurrency`` at
once; a record is built just before its request and checked as soon as its reply arrives. On
s3fs a page read, write or existence check is one request on s3fs's client
(:mod:`~hicache_storage_fsspec.s3_requests`), sent once more after a 5xx answer. A page
becomes visible whole: local disks write a temp file and rename it; object stores and the memory
filesystem store a value in one put. Reads verify the record (magic, length, the digest of the
storage key it was written under, XXH3-64, and with a secret its tag); a bad record is a miss
counted as ``integrity_failures``. On async filesystems a batch waits for its requests at most
what is left of the call's resilience deadline: requests still running then are cancelled (a read
scatters a record into its page only once the whole record has arrived, so a cancelled one has
written nothing) and count as faults of their keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import xxhash
from fsspec.asyn import sync
from fsspec.implementations.local import LocalFileSystem

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendSetup,
    BatchContext,
    Capabilities,
    ConfigError,
    PageBuffers,
    StoredPage,
    current_deadline,
    page_after,
)
from hicache_storage.plugin.page_format import HEADER_SIZE, record_codec

from .filesystem import S3_PROTOCOLS, open_filesystem
from .local_io import TEMP_SUFFIX, LocalPageFiles
from .options import FsspecOptions, redact_url
from .raw_baseline import RawFsspec
from .s3_requests import S3PageRequests

__all__ = ["FsspecBackend"]

log = logging.getLogger(__name__)


class FsspecBackend(Backend[FsspecOptions]):
    """Pages as files below ``extra_config.url`` on an fsspec filesystem (see :class:`FsspecOptions`).

    ``fs``, ``root``, ``path_for(storage_key)`` and ``page_files()`` give direct access to the
    stored pages (for tools). On ``s3://`` construction checks the bucket
    (``check_bucket``): refused credentials raise :class:`ConfigError`; anything else (a missing
    bucket, an unreachable endpoint) is left to the calls, which then miss.
    """

    Options = FsspecOptions
    #: Bulk fsspec calls under ``<root>/raw-baseline`` for ``hicache-storage bench`` to compare with.
    raw_baseline_class = RawFsspec
    capabilities = SHARED_STORE

    @classmethod
    def capabilities_for(cls, options: FsspecOptions) -> Capabilities:
        """An in-memory file system is seen by one process only."""
        return replace(cls.capabilities, shared=False) if options.protocol == "memory" else cls.capabilities

    def __init__(self, setup: BackendSetup[FsspecOptions]) -> None:
        options = setup.options
        self.options = options
        self.counters = setup.counters
        self.timeout_s = options.timeout_s or setup.io_timeout_s
        protocol = options.protocol
        try:
            self.fs, root, storage_options = open_filesystem(options, self.timeout_s)
        except (ImportError, ValueError, TypeError) as error:
            raise ConfigError(
                "extra_config.url", f"cannot open {redact_url(options.url)!r}: {type(error).__name__}: {error}"
            ) from None
        self.root = root.rstrip("/")
        if protocol in S3_PROTOCOLS and storage_options.get("skip_instance_cache"):
            self.fs.retries = 1  # s3fs retries connection errors with backoff; the SDK's policy retries
        if protocol in S3_PROTOCOLS and options.check_bucket and self.root:
            self._check_bucket(self.root.split("/", 1)[0])
        self._fanout = options.fanout_chars
        self._async = bool(getattr(self.fs, "async_impl", False))
        #: s3fs page requests without its retry wrapper (see :mod:`~hicache_storage_fsspec.s3_requests`).
        self._s3 = S3PageRequests(self.fs, self._server_error_retried) if protocol in S3_PROTOCOLS else None
        self._codec = record_codec(options)
        self._local = LocalPageFiles(self._codec) if isinstance(self.fs, LocalFileSystem) else None
        mode = options.write_mode
        self._rename = mode == "rename" or (mode == "auto" and self._local is not None)
        if self._local is not None:
            try:
                self.fs.makedirs(self.root, exist_ok=True)
            except OSError as error:
                raise ConfigError("extra_config.url", f"cannot create {self.root!r}: {error}") from None
        self._page_name = re.compile(
            re.escape(self.root + "/")
            + (f"[0-9a-f]{{{self._fanout}}}/" if self._fanout else "")
            + r"[A-Za-z0-9][A-Za-z0-9._-]*"
        )

    # ------------------------------------------------------------ helpers
    def _server_error_retried(self) -> None:
        self.counters.bump("server_error_retries")

    def path_for(self, storage_key: str) -> str:
        """Path (without protocol) of the file holding the page of ``storage_key``."""
        if self._fanout:
            return f"{self.root}/{xxhash.xxh3_64_hexdigest(storage_key.encode())[: self._fanout]}/{storage_key}"
        return f"{self.root}/{storage_key}"

    def page_files(self) -> list[str]:
        """Paths of every page file under the root."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.invalidate_cache()
            return [path for path in self.fs.find(self.root) if self._page_name.fullmatch(path)]
        return []

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Page files from one ``find`` of the root, in key order (each call lists the root again)."""
        if self._local is None:
            self.fs.invalidate_cache()
        records = []
        for path, info in self.fs.find(self.root, detail=True).items():
            if not self._page_name.fullmatch(path):
                continue
            records.append(StoredPage(path.rsplit("/", 1)[-1], _size_of(info), _modified_of(info)))
        return page_after(records, prefix, cursor, limit)

    def _check_bucket(self, bucket: str) -> None:
        """HEAD the bucket: refused or missing credentials raise :class:`ConfigError`, nothing else does."""
        from botocore.exceptions import NoCredentialsError  # s3fs's dependency, present for s3://

        try:
            self.fs.info(bucket)
        except PermissionError:
            raise ConfigError(
                "extra_config.storage_options",
                f"access to bucket {bucket!r} denied: check the credentials (key/secret/token, profile or "
                "environment) and their permissions",
            ) from None
        except NoCredentialsError:
            raise ConfigError(
                "extra_config.storage_options",
                f"no AWS credentials found for bucket {bucket!r} (set key/secret in storage_options, "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile; anon: true for public buckets)",
            ) from None
        except Exception as error:  # missing bucket, endpoint down: left to the calls, which miss
            log.debug("bucket %r not checked at start-up (%s)", bucket, type(error).__name__)

    def _gather(self, make: Callable[[Any], Awaitable[Any]], items: Sequence[Any]) -> list[Any]:
        """Run ``make(item)`` for every item on the filesystem's loop, at most ``concurrency`` at
        once (``make`` is called only when a slot is free); results or exceptions, in order.

        Under a call deadline, items not done by then are cancelled (and waited for until they
        have stopped) and come back as :class:`TimeoutError`.
        """
        limit = self.options.concurrency
        deadline = current_deadline()

        async def run() -> list[Any]:
            gate = asyncio.Semaphore(limit)

            async def one(item: Any) -> Any:
                async with gate:
                    return await make(item)

            tasks = [asyncio.ensure_future(one(item)) for item in items]
            if not tasks:
                return []
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            _done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            out: list[Any] = []
            for task in tasks:
                if task.cancelled():
                    out.append(TimeoutError("not done within the call's deadline"))
                else:
                    out.append(task.exception() or task.result())
            return out

        return list(sync(self.fs.loop, run, timeout=None))

    def _each(self, paths: list[str], call: Callable[[str], Any]) -> list[Any]:
        """``call(path)`` for every path, results or exceptions in order: on the filesystem's loop
        (:meth:`_gather`) when the filesystem is asynchronous (``call`` then is its coroutine method)."""
        if self._async:
            return self._gather(call, paths)
        outcomes: list[Any] = []
        for path in paths:
            try:
                outcomes.append(call(path))
            except Exception as error:
                outcomes.append(error)
        return outcomes

    def _settle(self, outcomes: list[Any], ok: Callable[[Any], bool]) -> list[bool]:
        """Per-key results from values or exceptions: a missing file is ``False``; if every key
        faulted otherwise, the first fault is raised (an outage, for the resilience policy)."""
        faults = [
            item for item in outcomes if isinstance(item, BaseException) and not isinstance(item, FileNotFoundError)
        ]
        if faults and len(faults) == len(outcomes):
            raise faults[0]
        if faults:
            self.counters.bump("key_faults", len(faults))
        return [False if isinstance(item, BaseException) else ok(item) for item in outcomes]

    def release(self) -> None:
        if self._local is not None:
            self._local.leftovers.sweep()

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        paths = [self.path_for(key) for key in keys]
        if self._local is not None:
            outcomes: list[Any] = []
            for path, key, page in zip(paths, keys, pages, strict=True):
                try:
                    self._local.write(path, key, page)
                    outcomes.append(True)
                except OSError as error:  # this page fails; the others of the batch go on
                    outcomes.append(error)
            return self._settle_writes(outcomes)
        if self._rename:
            for path, key, page in zip(paths, keys, pages, strict=True):
                record = self._codec.record(key, page)
                temp = f"{path}.{xxhash.xxh3_64_hexdigest(record)}{TEMP_SUFFIX}"
                self.fs.pipe_file(temp, record)
                self.fs.mv(temp, path)
        elif self._async:
            # Each record is built only when a request slot is free: while one page is joined and
            # checksummed, the others are on the wire, and at most `concurrency` records exist.
            pipe_file = self._s3.put if self._s3 is not None else self.fs._pipe_file

            async def put(item: tuple[str, str, PageBuffers]) -> Any:
                return await pipe_file(item[0], self._codec.record(item[1], item[2]))

            return self._settle_writes(self._gather(put, list(zip(paths, keys, pages, strict=True))))
        else:
            for path, key, page in zip(paths, keys, pages, strict=True):
                self.fs.pipe_file(path, self._codec.record(key, page))
        return [True] * len(keys)

    def _settle_writes(self, outcomes: list[Any]) -> list[bool]:
        """Per-page write results: a failed put is ``False``; if every put failed, the first fault is raised."""
        faults = [item for item in outcomes if isinstance(item, BaseException)]
        if faults and len(faults) == len(outcomes):
            raise faults[0]
        if faults:
            self.counters.bump("key_faults", len(faults))
        return [not isinstance(item, BaseException) for item in outcomes]

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        paths = [self.path_for(key) for key in keys]
        if self._local is not None:
            found = [self._local.read(path, key, page) for path, key, page in zip(paths, keys, pages, strict=True)]
            return [self._count_bad(item is not False) and item is True for item in found]
        if self._async:
            # Each record is checked and scattered into its page as soon as it arrives, while the
            # other requests are still in flight.
            cat_file = self._s3.get if self._s3 is not None else self.fs._cat_file

            async def fetch(item: tuple[str, str, PageBuffers]) -> bool:
                value = await cat_file(item[0])
                return len(value) == want and self._codec.decode_into(value, item[1], item[2])

            outcomes = self._gather(fetch, list(zip(paths, keys, pages, strict=True)))
            return self._settle(outcomes, self._count_bad)
        data = self.fs.cat(paths, on_error="return")
        outcomes = [data.get(path, FileNotFoundError(path)) for path in paths]
        hits = self._settle(outcomes, lambda _value: True)
        return [
            hit and self._count_bad(len(value) == want and self._codec.decode_into(value, key, page))
            for hit, value, key, page in zip(hits, outcomes, keys, pages, strict=True)
        ]

    def _count_bad(self, good: bool) -> bool:
        if not good:
            self.counters.bump("integrity_failures")
        return good

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        want = HEADER_SIZE + context.page_bytes
        paths = [self.path_for(key) for key in keys]
        if self._local is not None:
            return [self._local.exists(path, want) for path in paths]
        if self._s3 is not None:
            return self._settle(self._gather(self._s3.size, paths), lambda size: size == want)
        outcomes = self._each(paths, self.fs._info if self._async else self.fs.info)
        return self._settle(outcomes, lambda info: info.get("type") == "file" and info.get("size") == want)

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        return self._remove([self.path_for(key) for key in keys])

    def _remove(self, paths: list[str]) -> list[bool]:
        outcomes = self._each(paths, self.fs._rm_file if self._async else self.fs.rm_file)
        return [not isinstance(item, BaseException) or isinstance(item, FileNotFoundError) for item in outcomes]

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove the page files (and leftover temp files) of the key spaces ``prefixes`` under the root
        (``None``: of every key space); nothing else."""
        paths = self.page_files()
        with contextlib.suppress(FileNotFoundError):
            paths += [path for path in self.fs.find(self.root) if path.endswith(TEMP_SUFFIX)]
        if prefixes is not None:
            starts = tuple(prefixes) + tuple("." + start[:40] for start in prefixes)
            paths = [path for path in paths if path.rsplit("/", 1)[-1].startswith(starts)]
        if paths and not all(self._remove(paths)):
            raise OSError(f"could not remove every page under {self.root!r}")
        self.fs.invalidate_cache()

    def __repr__(self) -> str:
        return f"<FsspecBackend {self.options!r}>"


def _size_of(info: dict[str, Any]) -> int | None:
    size = info.get("size", info.get("Size"))
    return int(size) if isinstance(size, (int, float)) else None


def _modified_of(info: dict[str, Any]) -> float | None:
    """Last write time from an fsspec ``info`` dict (local ``mtime``, s3 ``LastModified``, memory ``created``)."""
    for name in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(name)
        if isinstance(value, (int, float)):
            return float(value)
        stamp = getattr(value, "timestamp", None)
        if callable(stamp):
            return float(stamp())
    return None
