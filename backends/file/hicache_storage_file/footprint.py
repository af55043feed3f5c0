"""What the file backend's pages take on disk, and the directory fan-out that fits a store's size.

**Footprint.** A page file takes whole file-system blocks (a 16,440-byte record of a 16 KiB page
takes 20,480 bytes on 4 KiB blocks) and an entry in its directory; directories grow with their
entries and never shrink (ext4), by more than the entries' bytes under churn (temp names, leaf
splits). :class:`Footprint` charges each page its size rounded up to the block, and estimates a
new directory entry at twice what ext4 stores (8 bytes and the name, rounded to 4) until the
directories are measured again (their allocated size from ``stat``; see
:class:`~hicache_storage_file.eviction.SizeLimit`). ``max_bytes`` bounds the sum, so ``du`` of a
store written by one process stays within the limit.

**Fan-out.** Without ``fanout_levels``, a store's existing layout is kept (found by walking down
its fan-out directories to a page file, so stores written before stay readable); a new store gets
one level (256 directories) when their blocks take at most 1/128 of ``max_bytes`` (from 128 MiB,
and without a limit), else none. Never two by choice: with 65,536 directories most writes of a
store's first few hundred thousand pages also create one or two directories, and a ``mkdir``
(an inode and a block) costs about as much as writing a 512 KiB page file; the 256 directories of
one level all exist after about 1,600 pages.
"""

from __future__ import annotations

import os
import re

__all__ = ["DEFAULT_FANOUT_LEVELS", "Footprint", "choose_fanout", "directories_fit", "fanout_for_limit", "find_fanout"]

#: Levels of a new store without ``max_bytes``, and the most a limit chooses.
DEFAULT_FANOUT_LEVELS = 1
#: Share of ``max_bytes`` the directories of an automatically chosen fan-out may take at most.
_DIRECTORY_SHARE = 1 / 128
_FANOUT_DIR = re.compile(r"[0-9a-f]{2}")
_PAGE_FILE = re.compile(r"hc[0-9]+-[0-9a-f]+\.[A-Za-z0-9._+-]+")
_BLOCK_FALLBACK = 4096


class Footprint:
    """Bytes a page file and a directory take below ``root``, in its file system's blocks."""

    def __init__(self, root: str) -> None:
        try:
            info = os.statvfs(root)
            block = info.f_frsize or info.f_bsize
        except (OSError, AttributeError):
            block = 0
        #: Allocation unit of the file system (bytes).
        self.block = block if block > 0 else _BLOCK_FALLBACK

    def page(self, size: int) -> int:
        """Disk bytes of a page file of ``size`` bytes: whole blocks."""
        return -(-size // self.block) * self.block

    @staticmethod
    def entry(path: str) -> int:
        """Estimated growth of a directory by the entry of the file at ``path`` (twice ext4's entry)."""
        name = len(path) - path.rfind("/") - 1
        return 2 * (-(-(8 + name) // 4) * 4)

    def measure(self, directory: str) -> int:
        """Allocated bytes of ``directory`` itself (0 when it is gone)."""
        try:
            return os.stat(directory).st_blocks * 512
        except OSError:
            return 0

    @property
    def directory(self) -> int:
        """Disk bytes of one (fan-out) directory before its entries: one block."""
        return self.block


def directories_fit(levels: int, max_bytes: int, block: int = _BLOCK_FALLBACK) -> bool:
    """Whether every directory of a ``levels`` fan-out, one block each, fits 1/128 of ``max_bytes``."""
    directories = sum(1 << (8 * level) for level in range(1, levels + 1))  # 256 per level
    return directories * block <= max_bytes * _DIRECTORY_SHARE


def fanout_for_limit(max_bytes: int | None, block: int = _BLOCK_FALLBACK) -> int:
    """Levels for a new store: up to :data:`DEFAULT_FANOUT_LEVELS`, as many as :func:`directories_fit`."""
    if max_bytes is None:
        return DEFAULT_FANOUT_LEVELS
    levels = 0
    while levels < DEFAULT_FANOUT_LEVELS and directories_fit(levels + 1, max_bytes, block):
        levels += 1
    return levels


def find_fanout(root: str) -> int | None:
    """Levels of the store under ``root``: the depth of the first page file below its fan-out
    directories (the deepest fan-out directory when none holds a page yet); ``None`` for an empty
    or missing root."""
    deepest: int | None = None
    stack = [(root, 0)]
    while stack:
        directory, depth = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        below = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if depth < 4 and _FANOUT_DIR.fullmatch(entry.name):
                    below.append((entry.path, depth + 1))
            elif _PAGE_FILE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                return depth
        if below:
            deepest = max(deepest or 0, depth + 1)
        stack.extend(reversed(below))
    return deepest


def choose_fanout(root: str, requested: int | None, max_bytes: int | None, block: int = _BLOCK_FALLBACK) -> int:
    """``requested`` when given, else the existing store's levels, else :func:`fanout_for_limit`."""
    if requested is not None:
        return requested
    found = find_fanout(root)
    return found if found is not None else fanout_for_limit(max_bytes, block)
