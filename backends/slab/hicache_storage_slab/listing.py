"""Listing the pages of every slab below a directory from their slot headers, a page of results at a time.

Each committed slot header names its storage key (see :mod:`~hicache_storage_slab.layout`), so a
listing needs no open backend: it reads the header areas of the slab files whose key-space prefix
can hold keys under the asked prefix. A page's size is its payload and its slot header. Keys come
in sorted order; the cursor is the last key returned. Pages written or evicted while a listing runs
may or may not appear; none appears twice.
"""

from __future__ import annotations

import contextlib
import os

from hicache_storage.plugin import StoredPage, keyspace_prefix_of

from .header_area import committed_entries
from .layout import ENTRY_SIZE, SUPERBLOCK_SIZE, SuperblockError, parse_superblock
from .slab_files import SLAB_FILE_MARK

__all__ = ["list_slab_pages", "slab_prefixes"]


def slab_prefixes(root: str) -> dict[str, list[str]]:
    """Key-space prefix -> paths of its slab files below ``root`` (temporary files excluded)."""
    found: dict[str, list[str]] = {}
    with contextlib.suppress(FileNotFoundError), os.scandir(root) as entries:
        for entry in entries:
            name = entry.name
            mark = name.rfind(SLAB_FILE_MARK)
            if mark <= 0 or name.startswith(".") or not name[mark + len(SLAB_FILE_MARK) :].isdigit():
                continue
            if entry.is_file(follow_symlinks=False):
                found.setdefault(name[:mark], []).append(entry.path)
    return found


def _stored(path: str) -> list[StoredPage]:
    """The listable pages of one slab file (none for a file that is not a valid slab file of this layout)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return []
    try:
        try:
            geometry, _index, _tag = parse_superblock(os.pread(fd, SUPERBLOCK_SIZE, 0))
        except SuperblockError:
            return []
        if os.fstat(fd).st_size < geometry.file_size:
            return []
        return [
            StoredPage(entry.key.decode(errors="replace"), entry.length + ENTRY_SIZE, entry.seq / 1e9)
            for entry in committed_entries(fd, geometry)
            if entry.key
        ]
    finally:
        os.close(fd)


def list_slab_pages(root: str, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
    """Up to ``limit`` stored pages whose storage key starts with ``prefix`` and sorts after ``cursor``."""
    newest: dict[str, StoredPage] = {}
    for name, paths in slab_prefixes(root).items():
        space = keyspace_prefix_of(name) or name  # a record slab's name continues its key space's prefix
        if not (space.startswith(prefix) or prefix.startswith(space)):
            continue
        for path in paths:
            for page in _stored(path):
                if not page.key.startswith(prefix) or (cursor is not None and page.key <= cursor):
                    continue
                known = newest.get(page.key)
                if known is None or (page.modified or 0) > (known.modified or 0):
                    newest[page.key] = page
    keys = sorted(newest)
    chosen = [newest[key] for key in keys[:limit]]
    return chosen, (chosen[-1].key if len(keys) > limit else None)
