"""A mapping over the mooncake backend's stored objects, for tools and tests (byte calls: small objects only)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from hicache_storage import BackendFault

from .client import OBJECT_NOT_FOUND

__all__ = ["MooncakeRawStore"]


class MooncakeRawStore(MutableMapping[str, bytes]):
    """Stored objects by storage key, through the backend's client.

    ``store_call(method, *args)`` calls the client's ``method`` (inside the backend's call gate),
    ``object_key`` maps a storage key to its Mooncake object key and ``replicate`` is the
    ``ReplicateConfig`` of writes. Mooncake cannot list keys, so iteration and ``len`` raise
    :class:`TypeError`.
    """

    def __init__(self, store_call: Callable[..., Any], object_key: Callable[[str], str], replicate: Any) -> None:
        self._call = store_call
        self._key = object_key
        self._replicate = replicate

    def __getitem__(self, key: str) -> bytes:
        name = self._key(key)
        if int(self._call("get_size", name)) < 0:
            raise KeyError(key)
        return bytes(self._call("get", name))

    def __setitem__(self, key: str, value: bytes) -> None:
        code = int(self._call("upsert", self._key(key), bytes(value), self._replicate))
        if code != 0:
            raise BackendFault(f"Mooncake upsert failed with code {code}")

    def __delitem__(self, key: str) -> None:
        code = int(self._call("remove", self._key(key), True))
        if code == OBJECT_NOT_FOUND:
            raise KeyError(key)
        if code != 0:
            raise BackendFault(f"Mooncake remove failed with code {code}")

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a Mooncake Store cannot list its keys")

    def __len__(self) -> int:
        raise TypeError("a Mooncake Store cannot count its keys")
