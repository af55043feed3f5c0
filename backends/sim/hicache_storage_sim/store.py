"""In-memory page stores of the sim backend: LRU order, optional capacity, named sharing.

A store named ``""`` is private to one backend instance; a store with a name is shared by every
instance in the process that opens the same name, and outlives them (a "restart" or a second
deployment can be simulated in-process) until :func:`drop_store` is called.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass

from hicache_storage import ConfigError

__all__ = ["RawStore", "SimStore", "drop_store", "open_store"]


@dataclass
class _Slot:
    record: bytes
    charged: int  # payload bytes counted against the capacity


class SimStore:
    """Records by storage key in least-recently-used order; all methods are thread-safe."""

    def __init__(self, name: str, capacity_bytes: int | None, keys_only: bool) -> None:
        self.name = name
        self.capacity_bytes = capacity_bytes
        self.keys_only = keys_only
        self.available = True
        self.lock = threading.RLock()
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._used = 0

    @property
    def used_bytes(self) -> int:
        """Payload bytes currently stored (what the capacity limits)."""
        with self.lock:
            return self._used

    def put(self, key: str, record: bytes, charged: int) -> tuple[bool, int]:
        """Store ``record`` as the newest entry; returns (stored, number of pages evicted).

        A page larger than the whole capacity is not stored.
        """
        capacity = self.capacity_bytes
        if capacity is not None and charged > capacity:
            return False, 0
        evicted = 0
        with self.lock:
            old = self._slots.pop(key, None)
            if old is not None:
                self._used -= old.charged
            self._slots[key] = _Slot(record, charged)
            self._used += charged
            while capacity is not None and self._used > capacity:
                _key, slot = self._slots.popitem(last=False)
                self._used -= slot.charged
                evicted += 1
        return True, evicted

    def get(self, key: str) -> bytes | None:
        """The record of ``key`` (now the most recently used), or ``None``."""
        with self.lock:
            slot = self._slots.get(key)
            if slot is None:
                return None
            self._slots.move_to_end(key)
            return slot.record

    def peek(self, key: str) -> bytes | None:
        """The record of ``key`` without changing the LRU order, or ``None``."""
        with self.lock:
            slot = self._slots.get(key)
            return None if slot is None else slot.record

    def replace(self, key: str, record: bytes) -> None:
        """Overwrite the stored record of ``key`` in place (same LRU position and charge if present)."""
        with self.lock:
            slot = self._slots.get(key)
            if slot is None:
                self._slots[key] = _Slot(record, len(record))
                self._used += len(record)
            else:
                slot.record = record

    def delete(self, key: str) -> bool:
        """Remove ``key``; ``True`` if it was present."""
        with self.lock:
            slot = self._slots.pop(key, None)
            if slot is None:
                return False
            self._used -= slot.charged
            return True

    def clear(self) -> None:
        """Remove every record."""
        with self.lock:
            self._slots.clear()
            self._used = 0

    def keys(self) -> list[str]:
        """Snapshot of the stored keys, least recently used first."""
        with self.lock:
            return list(self._slots)

    def __len__(self) -> int:
        with self.lock:
            return len(self._slots)


class RawStore(MutableMapping[str, bytes]):
    """Side channel to a store's records (header + payload) by storage key, for tests and tools.

    Reading does not change the LRU order; assigning replaces a record's bytes without the checks a
    write makes (so a test can plant a corrupt or truncated record); ``del`` removes it.
    """

    def __init__(self, store: SimStore) -> None:
        self._store = store

    def __getitem__(self, key: str) -> bytes:
        record = self._store.peek(key)
        if record is None:
            raise KeyError(key)
        return record

    def __setitem__(self, key: str, record: bytes) -> None:
        self._store.replace(key, bytes(record))

    def __delitem__(self, key: str) -> None:
        if not self._store.delete(key):
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.keys())

    def __len__(self) -> int:
        return len(self._store)


_named: dict[str, SimStore] = {}
_named_lock = threading.Lock()


def open_store(name: str, capacity_bytes: int | None, keys_only: bool) -> SimStore:
    """A new private store (``name == ""``) or the process-wide store called ``name``.

    Opening a named store with a different ``capacity_bytes`` or ``keys_only`` than it was created
    with raises :class:`ConfigError`.
    """
    if not name:
        return SimStore("", capacity_bytes, keys_only)
    with _named_lock:
        store = _named.get(name)
        if store is None:
            store = _named[name] = SimStore(name, capacity_bytes, keys_only)
            return store
    if store.capacity_bytes != capacity_bytes:
        raise ConfigError(
            "extra_config.capacity_bytes",
            f"store {name!r} already exists with capacity_bytes={store.capacity_bytes}, got {capacity_bytes}",
        )
    if store.keys_only != keys_only:
        raise ConfigError(
            "extra_config.keys_only", f"store {name!r} already exists with keys_only={store.keys_only}, got {keys_only}"
        )
    return store


def drop_store(name: str) -> None:
    """Forget the named store (its pages are gone for instances opened afterwards)."""
    with _named_lock:
        _named.pop(name, None)
