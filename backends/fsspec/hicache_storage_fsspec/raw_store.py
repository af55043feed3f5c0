"""Direct access to stored records, bypassing the backend (for inspection tools and tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

__all__ = ["FsspecRawStore"]


class FsspecRawStore(MutableMapping[str, bytes]):
    """Storage key → stored record bytes, read and written with the filesystem directly."""

    def __init__(self, fs: Any, path_for: Callable[[str], str], list_files: Callable[[], list[str]]) -> None:
        self._fs = fs
        self._path_for = path_for
        self._list_files = list_files

    def __getitem__(self, key: str) -> bytes:
        try:
            return bytes(self._fs.cat_file(self._path_for(key)))
        except FileNotFoundError:
            raise KeyError(key) from None

    def __setitem__(self, key: str, value: bytes) -> None:
        path = self._path_for(key)
        self._fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self._fs.pipe_file(path, bytes(value))

    def __delitem__(self, key: str) -> None:
        try:
            self._fs.rm_file(self._path_for(key))
        except FileNotFoundError:
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        for path in self._list_files():
            yield path.rsplit("/", 1)[-1]

    def __len__(self) -> int:
        return len(self._list_files())
