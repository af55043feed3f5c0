"""Direct access to stored records, bypassing the backend (for inspection tools and tests)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

__all__ = ["RedisRawStore", "glob_escape"]

_GLOB_SPECIAL = frozenset("*?[]\\")


def glob_escape(text: str) -> str:
    """``text`` with the SCAN MATCH glob characters escaped."""
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


class RedisRawStore(MutableMapping[str, bytes]):
    """Storage key → stored record bytes, read and written with the raw client."""

    def __init__(self, client: Any, key_prefix: str) -> None:
        self._client = client
        self._prefix = key_prefix

    def __getitem__(self, key: str) -> bytes:
        value = self._client.get(self._prefix + key)
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: str, value: bytes) -> None:
        self._client.set(self._prefix + key, bytes(value))

    def __delitem__(self, key: str) -> None:
        if not self._client.delete(self._prefix + key):
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        skip = len(self._prefix)
        for raw in self._client.scan_iter(match=glob_escape(self._prefix) + "*", count=1000):
            yield (raw.decode() if isinstance(raw, bytes) else str(raw))[skip:]

    def __len__(self) -> int:
        return sum(1 for _ in self)
