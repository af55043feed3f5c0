"""Open the fsspec filesystem of :class:`FsspecOptions`, as the backend and its raw baseline both do.

On s3fs the client gets bounded timeouts, no retries of its own (the SDK's resilience policy
retries) and an instance of its own, unless ``storage_options`` chose otherwise; its client is built
when the filesystem is opened.
"""

from __future__ import annotations

import contextlib
from typing import Any

import fsspec

from .options import FsspecOptions

__all__ = ["S3_PROTOCOLS", "open_filesystem", "with_client_defaults"]

#: URL schemes served by s3fs.
S3_PROTOCOLS = ("s3", "s3a")


def open_filesystem(options: FsspecOptions, timeout_s: float) -> tuple[Any, str, dict[str, Any]]:
    """(filesystem, root path without protocol, storage options used) for ``options.url``.

    Raises what ``fsspec.core.url_to_fs`` raises (``ImportError``, ``ValueError``, ``TypeError``...).
    """
    storage_options = with_client_defaults(options.protocol, dict(options.storage_options), timeout_s)
    fs, root = fsspec.core.url_to_fs(options.url, **storage_options)
    if options.protocol in S3_PROTOCOLS:
        _connect_now(fs)
    return fs, str(root), storage_options


def _connect_now(fs: Any) -> None:
    """Build s3fs's client now (no request is sent), so the first page call does not spend its deadline on
    it; where that fails, the first call builds it again and reports the fault."""
    with contextlib.suppress(Exception):
        fs.connect()


def with_client_defaults(protocol: str, storage_options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Bounded timeouts and no client-side retries for s3fs unless the caller chose otherwise."""
    if protocol not in S3_PROTOCOLS:
        return storage_options
    storage_options.setdefault("skip_instance_cache", True)  # own instance: its retry count is ours
    storage_options.setdefault("use_listings_cache", False)
    config = dict(storage_options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", timeout_s)
    config.setdefault("read_timeout", timeout_s)
    config.setdefault("retries", {"total_max_attempts": 1})
    storage_options["config_kwargs"] = config
    return storage_options
