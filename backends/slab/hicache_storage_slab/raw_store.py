"""The slab's stored records by storage key, behind the backend's back (for tools and the conformance hooks)."""

from __future__ import annotations

import os

from .backend import SlabBackend
from .layout import ENTRY_SIZE
from .slab import Slab

__all__ = ["SlotStore"]


class SlotStore:
    """The record a read of a storage key would use: its slot header (``ENTRY_SIZE`` bytes), then the page bytes.

    ``get(key)`` returns it (``None`` when no committed copy is found, whatever its bytes hold);
    ``store[key] = data`` writes ``data`` over it in place, header first, the rest zero-filled (to
    damage or truncate a page); ``pop(key)`` blanks the key's headers. Only keys of key spaces
    ``backend`` has opened are found. Not a full mapping (the backend's ``list_stored`` lists keys).
    """

    def __init__(self, backend: SlabBackend) -> None:
        self._backend = backend

    def _slab_of(self, key: str) -> Slab | None:
        return next((slab for slab in self._backend.open_slabs() if key.startswith(slab.prefix)), None)

    def get(self, key: str, default: bytes | None = None) -> bytes | None:
        slab = self._slab_of(key)
        where = slab.locate(key) if slab is not None else None
        if slab is None or where is None:
            return default
        file, header_offset, slot_offset = where
        header = os.pread(file.fd, ENTRY_SIZE, header_offset)
        return header + os.pread(file.fd, slab.geometry.page_bytes, slot_offset)

    def __getitem__(self, key: str) -> bytes:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __setitem__(self, key: str, data: bytes) -> None:
        slab = self._slab_of(key)
        where = slab.locate(key) if slab is not None else None
        if slab is None or where is None:
            raise KeyError(f"no stored copy of {key!r} to overwrite")
        file, header_offset, slot_offset = where
        page_bytes = slab.geometry.page_bytes
        if len(data) > ENTRY_SIZE + page_bytes:
            raise ValueError(f"a record holds at most {ENTRY_SIZE + page_bytes} bytes, got {len(data)}")
        record = bytes(data) + bytes(ENTRY_SIZE + page_bytes - len(data))
        os.pwrite(file.fd, record[ENTRY_SIZE:], slot_offset)
        os.pwrite(file.fd, record[:ENTRY_SIZE], header_offset)

    def pop(self, key: str, default: bytes | None = None) -> bytes | None:
        found = self.get(key, default)
        slab = self._slab_of(key)
        if slab is not None:
            slab.delete(key)
        return found

    def __delitem__(self, key: str) -> None:
        if self.pop(key) is None:
            raise KeyError(key)
