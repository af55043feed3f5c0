"""Listing the page files below a root in one stable order, a page of results at a time.

The order is that of each file's path relative to the root, with directories compared as
``name + "/"``; the cursor is the last path returned, so a listing resumes by skipping whole
fan-out directories that sort before it. Files created or removed while a listing runs may or may
not appear; none appears twice.
"""

from __future__ import annotations

import os
import re

from hicache_storage.plugin import StoredPage

__all__ = ["list_page_files"]

_FANOUT_DIR = re.compile(r"[0-9a-f]{2}")
_KEYSPACE_PAGE = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.[A-Za-z0-9_][A-Za-z0-9._-]*")


class _Full(Exception):
    """The page of results is complete."""


def list_page_files(root: str, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
    """Up to ``limit`` page files whose storage key starts with ``prefix``, after ``cursor``.

    Files named by a hashed long key (``...+<sha256>``) carry no readable key and are not listed.
    """
    found: list[StoredPage] = []
    last: list[str] = []

    def walk(directory: str, relative: str, depth: int) -> None:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        keyed = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if depth < 4 and _FANOUT_DIR.fullmatch(entry.name):
                    keyed.append((f"{relative}{entry.name}/", entry, True))
            elif entry.is_file(follow_symlinks=False) and _KEYSPACE_PAGE.fullmatch(entry.name):
                keyed.append((f"{relative}{entry.name}", entry, False))
        for path, entry, is_dir in sorted(keyed, key=lambda item: item[0]):
            if is_dir:
                if cursor is None or path > cursor or cursor.startswith(path):
                    walk(entry.path, path, depth + 1)
                continue
            if (cursor is not None and path <= cursor) or not entry.name.startswith(prefix):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append(StoredPage(entry.name, info.st_size, info.st_mtime))
            last[:] = [path]
            if len(found) >= limit:
                raise _Full

    try:
        walk(root, "", 0)
    except _Full:
        return found, last[0]
    return found, None
