"""What a store holds, for operators: stored-page listings and the manifest of each key space.

A storage key reads ``hc<version>-<digest>.<bare key>.<rank suffix>``; every key of one key space
(one model, revision, namespace, pool and geometry) starts with ``hc<version>-<digest>.``. Beside
its pages, each key space keeps a small manifest under the reserved bare key ``_manifest`` (a bare
key can never start with ``_``, so it collides with no page): who the pages belong to and when they
were first and last written, so a listing explains itself without a registry elsewhere.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

from .keys import KeySpace

__all__ = [
    "MANIFEST_BYTES",
    "page_after",
    "MANIFEST_KEY",
    "KeySpaceManifest",
    "PageListing",
    "StoredPage",
    "keyspace_prefix_of",
]

#: Bare key of a key space's manifest (bare page keys start with a letter or digit, never ``_``).
MANIFEST_KEY = "_manifest"
#: Stored size of a manifest record's payload (JSON padded with spaces).
MANIFEST_BYTES = 4096

_PREFIX = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.")


@dataclass(frozen=True)
class StoredPage:
    """One stored record: its storage key, stored bytes and last write time, where the backend knows them."""

    key: str
    nbytes: int | None = None
    modified: float | None = None

    @property
    def prefix(self) -> str | None:
        """The key-space prefix of :attr:`key` (``None`` for a key of no key space)."""
        return keyspace_prefix_of(self.key)

    @property
    def is_manifest(self) -> bool:
        """Whether this record is a key space's manifest rather than a page."""
        prefix = self.prefix
        return prefix is not None and self.key[len(prefix) :].startswith(MANIFEST_KEY + ".")


@dataclass(frozen=True)
class PageListing:
    """One page of a listing: the records, and the cursor for the next call (``None`` = done)."""

    pages: list[StoredPage]
    cursor: str | None


def keyspace_prefix_of(storage_key: str) -> str | None:
    """``hc<version>-<digest>.`` of a storage key, or ``None`` when it has none."""
    match = _PREFIX.match(storage_key)
    return match.group(0) if match else None


#: The manifest fields that are not the :class:`KeySpace` attribute of the same name.
_OWN_FIELDS = frozenset({"ranks", "first_write", "last_write", "pinned"})


@dataclass(frozen=True)
class KeySpaceManifest:
    """Who a key space's pages belong to; ``first_write``/``last_write`` are Unix times."""

    prefix: str
    model_name: str
    model_revision: str
    namespace: str
    pool: str
    dtype: str
    layout: str
    page_size: int
    page_bytes: int
    is_mla: bool
    ranks: str
    first_write: float
    last_write: float
    pinned: bool = False

    @classmethod
    def of(cls, space: KeySpace, first_write: float, last_write: float, *, pinned: bool = False) -> KeySpaceManifest:
        """The manifest of ``space``."""
        copied = {f.name: getattr(space, f.name) for f in fields(cls) if f.name not in _OWN_FIELDS}
        return cls(**copied, ranks=space.rank_suffix, first_write=first_write, last_write=last_write, pinned=pinned)

    def to_bytes(self) -> bytes:
        """Fixed-size record payload: UTF-8 JSON padded with spaces to :data:`MANIFEST_BYTES`."""
        raw = json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(raw) > MANIFEST_BYTES:
            raise ValueError(f"manifest of {self.prefix} is {len(raw)} bytes; at most {MANIFEST_BYTES} fit")
        return raw.ljust(MANIFEST_BYTES, b" ")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> KeySpaceManifest | None:
        """Parse a stored manifest; ``None`` for anything that is not one."""
        try:
            values: Any = json.loads(bytes(data).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        names = {item.name for item in fields(cls)}
        if not isinstance(values, dict) or not names - {"pinned"} <= set(values):
            return None
        try:
            return cls(**{name: values[name] for name in names if name in values})
        except TypeError:
            return None


def page_after(
    records: list[StoredPage], prefix: str, cursor: str | None, limit: int
) -> tuple[list[StoredPage], str | None]:
    """One page of a listing over ``records`` in key order: keys under ``prefix`` after ``cursor``.

    For backends that can enumerate their keys at once; the cursor is the last key returned.
    """
    chosen = sorted(
        (r for r in records if r.key.startswith(prefix) and (cursor is None or r.key > cursor)), key=lambda r: r.key
    )
    if len(chosen) > limit:
        return chosen[:limit], chosen[limit - 1].key
    return chosen, None
