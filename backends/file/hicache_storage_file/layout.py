"""Where a page lives on disk: fan-out directories, page file names and temp file names.

A page of storage key ``k`` is ``<root>/<h0>/<h1>/.../<name>``: ``fanout_levels`` directories named
by successive pairs of hex digits of the XXH3-64 of ``k``, then the file named ``k`` itself (keys
longer than :data:`NAME_LIMIT` are shortened and suffixed with ``+<sha256 of k>``). Temp files start
with ``.`` and end with ``.hctmp``; storage keys start with a letter or digit, so a temp name can
never be a page name.

Directories are created on demand (mode 0o700; ``on_directory`` hears of each one) and removed
again by :meth:`PageLayout.remove_empty_directories` once the last file in them is gone, so a
store whose pages were all deleted is its bare root again.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator

import xxhash

__all__ = ["NAME_LIMIT", "TEMP_SUFFIX", "PageLayout"]

#: Longest page file name kept verbatim (file systems allow 255 bytes; temp names add a suffix).
NAME_LIMIT = 180
TEMP_SUFFIX = ".hctmp"
_PAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\+[0-9a-f]{64})?")
_KEYSPACE_NAME = re.compile(r"hc[0-9]+-[0-9a-f]+\..+")
_TEMP_NAME = re.compile(r"\.[A-Za-z0-9._+-]*" + re.escape(TEMP_SUFFIX))
_FANOUT_DIR = re.compile(r"[0-9a-f]{2}")


class PageLayout:
    """Maps storage keys to paths below ``root`` (plain ``str`` paths: they are on the hot path)."""

    def __init__(self, root: str, fanout_levels: int, on_directory: Callable[[str], None] | None = None) -> None:
        self.root = root.rstrip("/") or "/"
        self.fanout_levels = fanout_levels
        #: Called with the path of each directory :meth:`ensure_directory` creates.
        self.on_directory = on_directory

    @staticmethod
    def file_name(key: str) -> str:
        """File name of the page stored under ``key``."""
        if len(key) <= NAME_LIMIT:
            return key
        return f"{key[: NAME_LIMIT - 65]}+{hashlib.sha256(key.encode()).hexdigest()}"

    def directory_for(self, key: str) -> str:
        """Directory that holds the page of ``key``."""
        levels = self.fanout_levels
        if not levels:
            return self.root
        digest = xxhash.xxh3_64_hexdigest(key.encode())
        if levels == 2:
            return f"{self.root}/{digest[0:2]}/{digest[2:4]}"
        return "/".join([self.root, *(digest[2 * level : 2 * level + 2] for level in range(levels))])

    def path_for(self, key: str) -> str:
        """Full path of the page file of ``key``."""
        return f"{self.directory_for(key)}/{self.file_name(key)}"

    @staticmethod
    def temp_name(final_name: str, token: str) -> str:
        """A temp file name next to ``final_name``; ``token`` must be unique per write."""
        return f".{final_name[:40]}.{token}{TEMP_SUFFIX}"

    @staticmethod
    def is_temp_name(name: str) -> bool:
        """Whether ``name`` is one of our temp files."""
        return _TEMP_NAME.fullmatch(name) is not None

    def ensure_directory(self, directory: str) -> None:
        """Create ``directory`` and any missing parents up to the root, each with mode 0o700."""
        missing: list[str] = []
        current = directory
        while not os.path.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for path in reversed(missing):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            if self.on_directory is not None:
                self.on_directory(path)

    def remove_empty_directories(self, directory: str) -> list[str]:
        """Remove ``directory`` and then each parent below the root while empty; the paths removed.

        A directory another writer has put a file in since stays (``rmdir`` refuses it).
        """
        removed: list[str] = []
        root = self.root
        current = directory.rstrip("/")
        while current != root and current.startswith(root + "/"):
            try:
                os.rmdir(current)
            except OSError:  # not empty, already gone, or not ours to remove
                break
            removed.append(current)
            current = os.path.dirname(current)
        return removed

    def iter_fanout_directories(self) -> Iterator[str]:
        """Every fan-out directory below the root (two lowercase hex digits, at most four levels deep)."""
        stack = [(self.root, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if depth < 4 and entry.is_dir(follow_symlinks=False) and _FANOUT_DIR.fullmatch(entry.name):
                    yield entry.path
                    stack.append((entry.path, depth + 1))

    def iter_owned_files(self) -> Iterator[tuple[str, bool]]:
        """(path, is_temp) of every page file and temp file below the root, nothing else.

        Only the root and fan-out directories (two lowercase hex digits) at most four levels deep are
        searched; a file counts as a page when its name is a storage key of a key space
        (``hc<version>-<digest>.``...), whatever its content.
        """
        stack = [(self.root, 0)]
        while stack:
            directory, depth = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if depth < 4 and _FANOUT_DIR.fullmatch(entry.name):
                        stack.append((entry.path, depth + 1))
                elif entry.is_file(follow_symlinks=False):
                    if _TEMP_NAME.fullmatch(entry.name):
                        yield entry.path, True
                    elif _PAGE_NAME.fullmatch(entry.name) and _KEYSPACE_NAME.fullmatch(entry.name):
                        yield entry.path, False
