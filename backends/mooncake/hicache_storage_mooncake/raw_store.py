"""A mapping over the mooncake backend's stored objects, for the conformance hooks (byte calls: small objects only)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from hicache_storage.plugin import BackendFault

from .client import OBJECT_NOT_FOUND

if TYPE_CHECKING:
    from .backend import MooncakeBackend

__all__ = ["MooncakeRawStore"]


class MooncakeRawStore(MutableMapping[str, bytes]):
    """Stored objects by storage key, through ``backend``'s client (inside its call gate).

    Object keys are ``backend.mooncake_key(storage_key)``; writes use the backend's
    ``ReplicateConfig``. Mooncake cannot list keys, so iteration and ``len`` raise
    :class:`TypeError`; once the backend is released every call raises :class:`BackendFault`.
    """

    def __init__(self, backend: MooncakeBackend) -> None:
        self._backend = backend
        self._key = backend.mooncake_key
        self._replicate = backend.replicate

    def _call(self, method: str, *args: Any) -> Any:
        with self._backend.gate:
            return getattr(self._backend.client, method)(*args)

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
