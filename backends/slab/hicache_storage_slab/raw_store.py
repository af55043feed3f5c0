"""The store's pages by storage key, behind the backend's back (for tools and the conformance hooks)."""

from __future__ import annotations

import os

from .backend import SlabBackend
from .store import Store

__all__ = ["SlotStore"]


class SlotStore:
    """The bytes a read of a storage key would check: its slots' contents, chunk after chunk.

    ``get(key)`` returns them (``None`` when the index holds no page of ``key``); ``store[key] = data``
    writes ``data`` over them in place, the rest zero-filled (to damage or truncate a page); ``pop(key)``
    removes the key's entry from the index. Not a full mapping (the backend's ``list_stored`` lists keys).
    """

    def __init__(self, backend: SlabBackend) -> None:
        self._backend = backend

    def _store(self) -> Store | None:
        return self._backend.store(create=False)

    def get(self, key: str, default: bytes | None = None) -> bytes | None:
        store = self._store()
        found = store.locate(key) if store is not None else None
        if found is None:
            return default
        entry, chunks = found
        data = b"".join(os.pread(file.fd, entry.chunk_bytes, offset) for file, offset in chunks)
        return data[: entry.length]

    def __getitem__(self, key: str) -> bytes:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, data: bytes) -> None:
        store = self._store()
        found = store.locate(key) if store is not None else None
        if found is None:
            raise KeyError(f"no stored copy of {key!r} to overwrite")
        entry, chunks = found
        if len(data) > entry.length:
            raise ValueError(f"a page of {key!r} holds {entry.length} bytes, got {len(data)}")
        padded = bytes(data) + bytes(entry.length - len(data))
        for number, (file, offset) in enumerate(chunks):
            os.pwrite(file.fd, padded[number * entry.chunk_bytes : (number + 1) * entry.chunk_bytes], offset)

    def pop(self, key: str, default: bytes | None = None) -> bytes | None:
        found = self.get(key, default)
        store = self._store()
        if store is not None:
            store.delete([key])
        return found

    def __delitem__(self, key: str) -> None:
        if self.pop(key) is None:
            raise KeyError(key)
