"""The slabs one backend instance has open, by name: one per key space, and small ones for records of
another size (a key space's manifest), opened or created on first use and found on disk for tools.

A slab's *name* is the prefix of its file names: the key space's prefix (``hc1-<digest>.``) for its
pages, ``<prefix>r<size>.`` for its records of ``size`` bytes.
"""

from __future__ import annotations

import os
import threading
import time

from hicache_storage.plugin import BackendFault, ConfigError, Counters, KeySpace
from hicache_storage.plugin.page_format import RecordCodec

from .layout import BLOCK, ENTRY_SIZE, SUPERBLOCK_SIZE, Geometry, LegacyLayoutError, SuperblockError, parse_superblock
from .listing import slab_prefixes
from .options import SlabOptions
from .slab import Slab
from .slab_files import slab_file_name

__all__ = ["RECORD_SLOTS", "RETRY_OPEN_S", "SlabRegistry", "record_slab_name"]

#: Seconds a slab that could not be opened (disk full, I/O error) fails fast before a retry.
RETRY_OPEN_S = 5.0
#: Slots of a slab of records of another size (one set: the records of a key space are few).
RECORD_SLOTS = 8


def record_slab_name(prefix: str, size: int) -> str:
    """Name of the slab holding the records of ``size`` bytes of the key space with ``prefix``."""
    return f"{prefix}r{size}."


class SlabRegistry:
    """Open slabs by name, created under the options of one backend instance (thread-safe)."""

    def __init__(self, root: str, options: SlabOptions, codec: RecordCodec, counters: Counters) -> None:
        self._root = root
        self._options = options
        self._codec = codec
        self._counters = counters
        self._slabs: dict[str, Slab] = {}
        self._lock = threading.Lock()
        self._open_failures: dict[str, tuple[float, str]] = {}

    def slab(self, keyspace: KeySpace) -> Slab:
        """The slab of ``keyspace``'s pages, opened (created or re-created if needed) on first use.

        Raises :class:`BackendFault` when it cannot be opened, and for :data:`RETRY_OPEN_S` seconds after
        that without trying again; :class:`ConfigError` for slab files of an earlier layout.
        """
        options = self._options
        slab = self._slabs.get(keyspace.prefix)
        if slab is not None:
            return slab
        geometry = Geometry.plan(
            keyspace.page_bytes, options.capacity_for(keyspace.pool), options.ways, options.file_bytes
        )
        return self._get(keyspace.prefix, geometry)

    def record_slab(self, prefix: str, size: int, *, create: bool) -> Slab | None:
        """The slab of the records of ``size`` bytes of key space ``prefix``; ``None`` if there is none
        and ``create`` is false."""
        name = record_slab_name(prefix, size)
        slab = self._slabs.get(name)
        if slab is not None:
            return slab
        if not create and not os.path.exists(os.path.join(self._root, slab_file_name(name, 0))):
            return None
        slot = -(-size // BLOCK) * BLOCK
        capacity = 3 * BLOCK + slot + RECORD_SLOTS * (slot + ENTRY_SIZE)
        return self._get(name, Geometry.plan(size, capacity, RECORD_SLOTS, self._options.file_bytes))

    def stored(self, prefix: str) -> list[Slab]:
        """Every slab on disk whose name starts with ``prefix`` (opened with the geometry its files record)."""
        found: list[Slab] = []
        for name in slab_prefixes(self._root):
            if not name.startswith(prefix):
                continue
            slab = self._slabs.get(name)
            if slab is None:
                try:
                    with open(os.path.join(self._root, slab_file_name(name, 0)), "rb") as handle:
                        geometry = parse_superblock(handle.read(SUPERBLOCK_SIZE))[0]
                except (FileNotFoundError, SuperblockError):
                    continue
                slab = self._get(name, geometry)
            found.append(slab)
        return found

    def open_slabs(self) -> list[Slab]:
        """Every slab open so far."""
        with self._lock:
            return list(self._slabs.values())

    def close(self) -> list[str]:
        """Close every slab; the names of those that were open."""
        with self._lock:
            slabs = list(self._slabs.values())
            self._slabs.clear()
        for slab in slabs:
            slab.close()
        return [slab.prefix for slab in slabs]

    def _get(self, name: str, geometry: Geometry) -> Slab:
        with self._lock:
            slab = self._slabs.get(name)
            if slab is not None:
                return slab
            failure = self._open_failures.get(name)
            if failure is not None and time.monotonic() < failure[0]:
                raise BackendFault(failure[1])
            try:
                slab = self._open(name, geometry)
            except OSError as error:
                message = f"cannot open the slab of {name!r} ({geometry.total_bytes} bytes) in {self._root!r}: {error}"
                self._open_failures[name] = (time.monotonic() + RETRY_OPEN_S, message)
                self._counters.bump("slab_open_failures")
                raise BackendFault(message) from error
            self._open_failures.pop(name, None)
            self._slabs[name] = slab
            return slab

    def _open(self, name: str, geometry: Geometry) -> Slab:
        options = self._options
        try:
            return Slab(
                self._root,
                name,
                geometry,
                direct_io=options.direct_io,
                durable=options.fsync,
                zero_fill=options.zero_fill,
                bump=self._counters.bump,
                codec=self._codec,
                touch_after_s=options.read_recency_s,
                choices=options.choices,
            )
        except LegacyLayoutError:
            raise ConfigError(
                "extra_config.path",
                f"{self._root!r} holds slab files of an earlier layout ({name}slab-*): they hold cached pages "
                f"only; remove them (rm {os.path.join(self._root, name)}slab-*) and this version creates "
                "them anew",
            ) from None
