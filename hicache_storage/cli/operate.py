"""Operator commands: ``usage`` here; ``purge`` (:mod:`.purge`), ``health`` and ``metrics`` (:mod:`.health`).

``usage`` groups a listing by key space and names each from its manifest. A manifest counts only
for the key space it is stored in: one whose recorded prefix names another key space is ignored
(the key space shows as unnamed), so no command acts on another key space's say-so.
Every command checks its ``--config`` before opening the store, never creates a store that does
not exist, and says in one line (exit status 2) when the backend cannot do what it asks.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from ..contract import HiCacheStorage
from ..listing import KeySpaceManifest, StoredPage
from ..store_admin import iter_pages, read_manifest
from .store_access import backend_arguments, open_store

__all__ = ["LIST_NEEDS", "KeySpaceUsage", "add_usage_command", "named_cells", "usage_of"]

#: Capabilities ``usage`` needs.
LIST_NEEDS = ("supports_list",)


@dataclass
class KeySpaceUsage:
    """Pages and bytes of one key space, with its manifest when it has one it may trust.

    ``foreign_manifest`` is the prefix a manifest stored here claimed instead of this key space's
    own (that manifest is not used).
    """

    prefix: str
    manifest: KeySpaceManifest | None = None
    pages: int = 0
    nbytes: int = 0
    oldest: float | None = None
    newest: float | None = None
    ranks: set[str] = field(default_factory=set)
    records: list[StoredPage] = field(default_factory=list)
    manifest_keys: list[str] = field(default_factory=list)
    foreign_manifest: str | None = None

    @property
    def keys(self) -> list[str]:
        """Storage keys of the pages (manifests excluded)."""
        return [page.key for page in self.records]

    def add(self, page: StoredPage) -> None:
        self.pages += 1
        self.nbytes += page.nbytes or 0
        self.records.append(page)
        if page.modified is not None:
            self.oldest = page.modified if self.oldest is None else min(self.oldest, page.modified)
            self.newest = page.modified if self.newest is None else max(self.newest, page.modified)

    def row(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "prefix": self.prefix,
            "model": m.model_name if m else None,
            "revision": m.model_revision if m else None,
            "namespace": m.namespace if m else None,
            "pool": m.pool if m else None,
            "dtype": m.dtype if m else None,
            "page_bytes": m.page_bytes if m else None,
            "ranks": sorted(self.ranks),
            "pages": self.pages,
            "bytes": self.nbytes,
            "first_write": m.first_write if m else self.oldest,
            "last_write": m.last_write if m else self.newest,
            "pinned": m.pinned if m else False,
            "foreign_manifest": self.foreign_manifest,
        }


def _adopt_manifest(storage: HiCacheStorage, space: KeySpaceUsage, key: str) -> None:
    """Read the manifest at ``key``: the first naming ``space`` itself is its manifest; one naming
    another key space is recorded in ``foreign_manifest`` and never used."""
    found = read_manifest(storage, key)
    if found is None:
        return
    if found.prefix != space.prefix:
        space.foreign_manifest = found.prefix
    elif space.manifest is None:
        space.manifest = found


def usage_of(storage: HiCacheStorage) -> list[KeySpaceUsage]:
    """Every key space under the backend's location, pages counted, manifests read (listing order)."""
    spaces: dict[str, KeySpaceUsage] = {}
    for page in iter_pages(storage):
        prefix = page.prefix
        if prefix is None:
            continue
        space = spaces.setdefault(prefix, KeySpaceUsage(prefix))
        if page.is_manifest:
            space.manifest_keys.append(page.key)
            space.ranks.add(page.key[len(prefix) :].split(".", 1)[1])
            _adopt_manifest(storage, space, page.key)
        else:
            space.add(page)
    return list(spaces.values())


def named_cells(row: dict[str, Any]) -> list[str]:
    """Table cells naming a key space: prefix, model, revision, namespace, pool (``?`` when unknown)."""
    return [row["prefix"], row["model"] or "?", row["revision"] or "", row["namespace"] or "", row["pool"] or "?"]


def _when(value: float | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _cmd_usage(args: argparse.Namespace, console: Console) -> int:
    with open_store(args, "usage", LIST_NEEDS) as storage:
        spaces = usage_of(storage)
    rows = [space.row() for space in spaces]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title=f"{args.backend}: pages and bytes per key space")
    columns = ("key space", "model", "revision", "namespace", "pool", "dtype", "ranks", "pages", "bytes", "last write")
    for column in columns:
        table.add_column(column, justify="right" if column in ("pages", "bytes") else "left")
    for row in rows:
        table.add_row(
            *named_cells(row),
            row["dtype"] or "?",
            ",".join(row["ranks"]) or "-",
            str(row["pages"]),
            f"{row['bytes'] / 2**20:.1f} MiB",
            _when(row["last_write"]),
        )
    console.print(table)
    console.print(
        f"{len(rows)} key spaces, {sum(r['pages'] for r in rows)} pages, {sum(r['bytes'] for r in rows)} bytes",
        highlight=False,
    )
    for row in rows:
        if row["foreign_manifest"]:
            console.print(
                f"{row['prefix']}: its manifest names another key space ({row['foreign_manifest']}) and is "
                "ignored; purge reaches this key space only by --prefix or --older-than",
                highlight=False,
            )
    return 0


def add_usage_command(sub: Any) -> None:
    """Register ``usage`` on the ``hicache-storage`` parser."""
    usage = sub.add_parser("usage", help="pages and bytes per key space (model, revision, namespace, pool)")
    backend_arguments(usage)
    usage.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    usage.set_defaults(handler=_cmd_usage)
