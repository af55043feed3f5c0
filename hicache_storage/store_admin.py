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
from typing import Any, Protocol

from .capabilities import Capabilities
from .errors import BackendFault, InvalidRequestError, UnsupportedOperation
from .keys import KeySpace
from .listing import MANIFEST_BYTES, MANIFEST_KEY, KeySpaceManifest, PageListing, StoredPage
from .plugin.backend import Backend
from .pools.context import BatchContext
from .stats import StorageStats

__all__ = ["MANIFEST_REFRESH_S", "ManifestKeeper", "StoreAdmin", "iter_pages", "manifest_key", "read_manifest"]

#: Seconds between two manifest writes of one pool by one instance (its ``last_write`` resolution).
MANIFEST_REFRESH_S = 60.0

_STORAGE_KEY = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.[A-Za-z0-9_][A-Za-z0-9._-]*")
_PREFIX = re.compile(r"(hc[0-9]+-[0-9a-f]{20}\.)?")


class StoreAdmin:
    """Operator calls over a backend's unguarded path (``operator`` of its layer stack).

    ``name`` is the backend's class name (for messages); faults are counted in ``stats`` and raised
    as :class:`BackendFault`.
    """

    def __init__(self, operator: Backend[Any], capabilities: Capabilities, stats: StorageStats, name: str) -> None:
        self.operator = operator
        self.capabilities = capabilities
        self.stats = stats
        self.name = name

    def _require(self, capability: str) -> None:
        if not getattr(self.capabilities, capability):
            raise UnsupportedOperation(f"{self.name} does not declare {capability}")

    def list_pages(self, prefix: str = "", *, limit: int = 1000, cursor: str | None = None) -> PageListing:
        """Up to ``limit`` stored records whose storage key starts with ``prefix`` (a key-space prefix or ``""``).

        Needs ``supports_list``. Pass the returned cursor to continue; faults raise :class:`BackendFault`.
        """
        self._require("supports_list")
        if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None:
            raise InvalidRequestError(f"prefix must be '' or a key-space prefix like 'hc1-<20 hex>.', got {prefix!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidRequestError(f"limit must be a positive int, got {limit!r}")
        try:
            pages, following = self.operator.list_stored(prefix, cursor, limit)
        except (InvalidRequestError, NotImplementedError):
            raise
        except Exception as error:
            self.stats.fault("list", error)
            raise BackendFault(f"{self.name} could not list {prefix or 'its pages'}: {error}") from error
        return PageListing([page for page in pages if page.key.startswith(prefix)], following)

    def delete_stored(self, storage_keys: Sequence[str]) -> list[bool]:
        """Remove records by storage key (as :meth:`list_pages` returns them); one bool per key.

        Needs ``supports_delete``. The primitive gets a context with ``pool == ""`` and ``page_bytes == 0``.
        """
        self._require("supports_delete")
        keys = list(storage_keys)
        for index, key in enumerate(keys):
            if not isinstance(key, str) or _STORAGE_KEY.fullmatch(key) is None or len(key) > 512:
                raise InvalidRequestError(
                    f"storage_keys[{index}] = {key!r} is not a storage key (hc<n>-<digest>.<key>...)"
                )
        if not keys:
            return []
        try:
            return self.operator.delete_pages(keys, _raw_context())
        except Exception as error:
            self.stats.fault("delete", error)
            raise BackendFault(f"{self.name} could not delete: {error}") from error

    def read_manifest(self, space_or_key: KeySpace | str) -> KeySpaceManifest | None:
        """The stored manifest of a key space (or under a manifest storage key); ``None`` if absent or damaged."""
        key = manifest_key(space_or_key) if isinstance(space_or_key, KeySpace) else space_or_key
        space = space_or_key if isinstance(space_or_key, KeySpace) else _raw_context().keyspace
        buffer = bytearray(MANIFEST_BYTES)
        context = BatchContext(pool="", keyspace=space, record_bytes=MANIFEST_BYTES)
        try:
            found = self.operator.read_pages([key], [[memoryview(buffer)]], context)
        except Exception:
            return None
        return KeySpaceManifest.from_bytes(buffer) if found == [True] else None

    def write_manifest(self, space: KeySpace, manifest: KeySpaceManifest, pool: str) -> None:
        """Store ``manifest`` as ``space``'s (raises on a fault)."""
        record = bytearray(manifest.to_bytes())
        sized = BatchContext(pool=pool, keyspace=space, record_bytes=MANIFEST_BYTES)
        self.operator.write_pages([manifest_key(space)], [[memoryview(record)]], sized)


class _Lister(Protocol):
    def list_pages(self, prefix: str = "", *, limit: int = 1000, cursor: str | None = None) -> PageListing: ...


class _ManifestReader(Protocol):
    def read_manifest(self, space_or_key: KeySpace | str) -> KeySpaceManifest | None: ...


def iter_pages(storage: _Lister, prefix: str = "", *, batch: int = 1000) -> Iterator[StoredPage]:
    """Every stored record under ``prefix`` of ``storage`` (a caller instance), following the cursor."""
    cursor: str | None = None
    while True:
        listing = storage.list_pages(prefix, limit=batch, cursor=cursor)
        yield from listing.pages
        cursor = listing.cursor
        if cursor is None:
            return


def read_manifest(storage: _ManifestReader, space_or_key: KeySpace | str) -> KeySpaceManifest | None:
    """``storage.read_manifest(space_or_key)`` (for tools holding a caller instance)."""
    return storage.read_manifest(space_or_key)


def _raw_context(pool: str = "") -> BatchContext:
    space = KeySpace(model_name="", dtype="", layout="", page_size=1, page_bytes=0, is_mla=False, pool=pool or "kv")
    return BatchContext(pool=pool, keyspace=space)


def manifest_key(space: KeySpace) -> str:
    """The storage key of ``space``'s manifest record."""
    return f"{space.prefix}{MANIFEST_KEY}.{space.rank_suffix}"


class ManifestKeeper:
    """Writes each pool's manifest after writes, at most once per :data:`MANIFEST_REFRESH_S`."""

    def __init__(self, admin: StoreAdmin, refresh_s: float = MANIFEST_REFRESH_S, *, pinned: bool = False) -> None:
        self.admin = admin
        self.refresh_s = refresh_s
        self.pinned = pinned
        self._written: dict[str, float] = {}
        self._first: dict[str, float] = {}
        self._lock = threading.Lock()

    def after_write(self, space: KeySpace, context: BatchContext) -> None:
        """Record that ``space`` was written now (cheap unless a refresh is due); never raises."""
        key = manifest_key(space)
        now = time.time()
        with self._lock:
            last = self._written.get(key)
            if last is not None and now - last < self.refresh_s:
                return
            self._written[key] = now
        try:
            first = self._first.get(key)
            if first is None:
                known = self.admin.read_manifest(space)
                first = known.first_write if known is not None else now
                self._first[key] = first
            self.admin.write_manifest(space, KeySpaceManifest.of(space, first, now, pinned=self.pinned), context.pool)
        except Exception as error:  # a manifest is a convenience: never fail or slow the engine's write
            self.admin.stats.bump("manifest_write_failures")
            self.admin.stats.note(f"manifest: {type(error).__name__}: {error}")


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
