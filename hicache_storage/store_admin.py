"""Operator-side calls on a backend: list what it stores, keep key-space manifests, remove by storage key.

These run outside the engine's hot path (``hicache-storage usage``/``purge``/``health``), so they
raise on faults instead of turning them into misses. The one hot-path piece, writing a key space's
manifest, runs after a successful write at most once per :data:`MANIFEST_REFRESH_S` per pool and
never fails the write.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .batch_context import BatchContext
from .errors import BackendFault, InvalidRequestError
from .keys import KeySpace
from .listing import MANIFEST_BYTES, MANIFEST_KEY, KeySpaceManifest, PageListing, StoredPage

if TYPE_CHECKING:
    from .storage_core import StorageCore as HiCacheStorage

__all__ = ["MANIFEST_REFRESH_S", "ManifestKeeper", "delete_stored", "iter_pages", "list_pages", "read_manifest"]

#: Seconds between two manifest writes of one pool by one instance (its ``last_write`` resolution).
MANIFEST_REFRESH_S = 60.0

_STORAGE_KEY = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.[A-Za-z0-9_][A-Za-z0-9._-]*")
_PREFIX = re.compile(r"(hc[0-9]+-[0-9a-f]{20}\.)?")


def _require(storage: HiCacheStorage, capability: str) -> None:
    if not getattr(storage.capabilities, capability):
        from .errors import UnsupportedOperation

        raise UnsupportedOperation(f"{type(storage).__name__} does not declare {capability}")


def list_pages(
    storage: HiCacheStorage, prefix: str = "", *, limit: int = 1000, cursor: str | None = None
) -> PageListing:
    """Up to ``limit`` stored records whose storage key starts with ``prefix`` (a key-space prefix or ``""``).

    Needs ``supports_list``. Pass the returned cursor to continue; faults raise :class:`BackendFault`.
    """
    _require(storage, "supports_list")
    if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None:
        raise InvalidRequestError(f"prefix must be '' or a key-space prefix like 'hc1-<20 hex>.', got {prefix!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidRequestError(f"limit must be a positive int, got {limit!r}")
    try:
        pages, following = storage.list_stored(prefix, cursor, limit)
    except (InvalidRequestError, NotImplementedError):
        raise
    except Exception as error:
        storage.stats.fault("list", error)
        raise BackendFault(f"{type(storage).__name__} could not list {prefix or 'its pages'}: {error}") from error
    return PageListing([page for page in pages if page.key.startswith(prefix)], following)


def iter_pages(storage: HiCacheStorage, prefix: str = "", *, batch: int = 1000) -> Iterator[StoredPage]:
    """Every stored record under ``prefix``, following the cursor (see :func:`list_pages`)."""
    cursor: str | None = None
    while True:
        listing = list_pages(storage, prefix, limit=batch, cursor=cursor)
        yield from listing.pages
        cursor = listing.cursor
        if cursor is None:
            return


def _raw_context(pool: str = "") -> BatchContext:
    space = KeySpace(model_name="", dtype="", layout="", page_size=1, page_bytes=0, is_mla=False, pool=pool or "kv")
    return BatchContext(pool=pool, keyspace=space)


def delete_stored(storage: HiCacheStorage, storage_keys: Sequence[str]) -> list[bool]:
    """Remove records by storage key (as :func:`list_pages` returns them); one bool per key.

    Needs ``supports_delete``. The primitive gets a context with ``pool == ""`` and ``page_bytes == 0``.
    """
    _require(storage, "supports_delete")
    keys = list(storage_keys)
    for index, key in enumerate(keys):
        if not isinstance(key, str) or _STORAGE_KEY.fullmatch(key) is None or len(key) > 512:
            raise InvalidRequestError(f"storage_keys[{index}] = {key!r} is not a storage key (hc<n>-<digest>.<key>...)")
    results: list[bool] = []
    step = max(1, int(storage.capabilities.max_batch_size or 128))
    for begin in range(0, len(keys), step):
        chunk = keys[begin : begin + step]
        try:
            done = storage._primitive("delete_pages")(chunk, None, _raw_context())
        except Exception as error:
            storage.stats.fault("delete", error)
            raise BackendFault(f"{type(storage).__name__} could not delete: {error}") from error
        results.extend(item is True for item in done)
    return results


def _manifest_key(space: KeySpace) -> str:
    return f"{space.prefix}{MANIFEST_KEY}.{space.rank_suffix}"


def read_manifest(storage: HiCacheStorage, space_or_key: KeySpace | str) -> KeySpaceManifest | None:
    """The stored manifest of a key space (or under the manifest storage key given); ``None`` if absent or damaged."""
    key = _manifest_key(space_or_key) if isinstance(space_or_key, KeySpace) else space_or_key
    space = space_or_key if isinstance(space_or_key, KeySpace) else _raw_context().keyspace
    buffer = bytearray(MANIFEST_BYTES)
    context = BatchContext(pool="", keyspace=space, record_bytes=MANIFEST_BYTES)
    try:
        found = storage._primitive("read_pages")([key], [[memoryview(buffer)]], context)
    except Exception:
        return None
    return KeySpaceManifest.from_bytes(buffer) if found == [True] else None


class ManifestKeeper:
    """Writes each pool's manifest after writes, at most once per :data:`MANIFEST_REFRESH_S`."""

    def __init__(self, refresh_s: float = MANIFEST_REFRESH_S, *, pinned: bool = False) -> None:
        self.refresh_s = refresh_s
        self.pinned = pinned
        self._written: dict[str, float] = {}
        self._first: dict[str, float] = {}
        self._lock = threading.Lock()

    def after_write(self, storage: HiCacheStorage, space: KeySpace, context: BatchContext) -> None:
        """Record that ``space`` was written now (cheap unless a refresh is due); never raises."""
        key = _manifest_key(space)
        now = time.time()
        with self._lock:
            last = self._written.get(key)
            if last is not None and now - last < self.refresh_s:
                return
            self._written[key] = now
        try:
            first = self._first.get(key)
            if first is None:
                known = read_manifest(storage, space)
                first = known.first_write if known is not None else now
                self._first[key] = first
            manifest = KeySpaceManifest.of(space, first, now, pinned=self.pinned)
            record = bytearray(manifest.to_bytes())
            sized = BatchContext(pool=context.pool, keyspace=space, record_bytes=MANIFEST_BYTES)
            storage._primitive("write_pages")([key], [[memoryview(record)]], sized)
        except Exception as error:  # a manifest is a convenience: never fail or slow the engine's write
            storage.stats.bump("manifest_write_failures")
            storage.stats.last_fault = f"manifest: {type(error).__name__}: {error}"[:500]


def describe(manifest: KeySpaceManifest | None) -> dict[str, Any]:
    """A manifest as a plain row (empty values when the key space has none)."""
    if manifest is None:
        return {"model": "?", "revision": "", "namespace": "", "pool": "?", "dtype": "?", "page_bytes": None}
    return {
        "model": manifest.model_name,
        "revision": manifest.model_revision,
        "namespace": manifest.namespace,
        "pool": manifest.pool,
        "dtype": manifest.dtype,
        "page_bytes": manifest.page_bytes,
    }
