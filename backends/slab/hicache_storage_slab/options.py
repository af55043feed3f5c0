"""Options of the slab backend (``extra_config`` keys) and how the storage directory is resolved."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hicache_storage.plugin import ConfigError, resolve_directory
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["MAX_WAYS", "PATH_ENV", "SlabOptions", "resolve_root"]

#: Environment variable used when ``extra_config.path`` is not given.
PATH_ENV = "HICACHE_SLAB_PATH"
#: Most slots per set (a set's headers are read with one ``pread`` of ``64 * ways`` bytes).
MAX_WAYS = 64


@dataclass(frozen=True)
class SlabOptions(IntegrityOptions):
    """``path``: directory of the slab files (default: ``$HICACHE_SLAB_PATH``); ``capacity_bytes``:
    size of the slab of each key space (pool), headers included, preallocated when the key space is
    first used; ``pool_capacity_bytes``: per pool name (``"kv"``, ``"mamba"``, ...) a size that replaces
    ``capacity_bytes`` for that pool; ``ways``: slots per set (a key can live in any slot of its set;
    1 = direct-mapped); ``file_bytes``: largest slab file (a larger slab is split over several files);
    ``io_threads``: threads that move the pages of one batch (``None`` = ``min(4, CPU count)``, 1 = the
    calling thread only); ``direct_io``: open the slabs with ``O_DIRECT`` where the file system allows
    it (pages whose memory is not block-aligned still go through the page cache); ``fsync``: make a
    batch durable before it is acknowledged (payloads synced before any header commits them);
    ``zero_fill``: write zeros over a new slab once when it is created, so no slot is a fallocated
    ("unwritten") block the file system must convert on its first write (slower creation, full speed
    from the first write; without it the first pass over the slab runs slower);
    ``choices``: sets a key may live in (2: the one of the two whose victim is least recent, found
    by reading both; 1: one set per key);
    ``read_recency_s``: a read hit on a page that has not been made recent for this many seconds makes it
    recent again (one header store), so a set replaces its least recently *used* page; ``None``: reads
    never write, a set replaces its least recently written page;
    ``integrity_secret_env`` / ``integrity_secret_file``: where the secret that authenticates pages is
    (see :class:`~hicache_storage.plugin.page_format.IntegrityOptions`): every page then carries an
    HMAC tag over its key and bytes in its slot header, and a page without a valid one reads as a miss."""

    path: str | None = None
    capacity_bytes: int = 1 << 30
    pool_capacity_bytes: dict[str, int] | None = None
    ways: int = 64
    file_bytes: int = 64 << 30
    io_threads: int | None = None
    direct_io: bool = False
    fsync: bool = False
    zero_fill: bool = False
    read_recency_s: float | None = 1.0
    choices: int = 2

    def __post_init__(self) -> None:
        if self.path is not None and not self.path.strip():
            raise ConfigError("extra_config.path", "must be a non-empty directory path")
        _check_size("extra_config.capacity_bytes", self.capacity_bytes)
        for pool, size in (self.pool_capacity_bytes or {}).items():
            if not isinstance(pool, str) or not pool:
                raise ConfigError("extra_config.pool_capacity_bytes", f"keys must be pool names, got {pool!r}")
            if not isinstance(size, int) or isinstance(size, bool):
                raise ConfigError(f"extra_config.pool_capacity_bytes.{pool}", f"expected int, got {size!r}")
            _check_size(f"extra_config.pool_capacity_bytes.{pool}", size)
        if not 1 <= self.ways <= MAX_WAYS:
            raise ConfigError("extra_config.ways", f"must be in [1, {MAX_WAYS}], got {self.ways}")
        if self.file_bytes < 1 << 20:
            raise ConfigError("extra_config.file_bytes", f"must be at least 1 MiB, got {self.file_bytes}")
        if self.read_recency_s is not None and (
            isinstance(self.read_recency_s, bool) or not 0 <= self.read_recency_s <= 3600
        ):
            raise ConfigError(
                "extra_config.read_recency_s", f"must be seconds in [0, 3600] or null, got {self.read_recency_s!r}"
            )
        if self.choices not in (1, 2) or isinstance(self.choices, bool):
            raise ConfigError("extra_config.choices", f"must be 1 or 2, got {self.choices!r}")
        if self.io_threads is not None and not 1 <= self.io_threads <= 32:
            raise ConfigError("extra_config.io_threads", f"must be in [1, 32] or null, got {self.io_threads}")

    def store_directory(self) -> Path:
        """The slab directory (what operator commands check exists before opening the store)."""
        return resolve_root(self)

    def capacity_for(self, pool: str) -> int:
        """Slab size of the key space of ``pool``."""
        return (self.pool_capacity_bytes or {}).get(pool, self.capacity_bytes)


def _check_size(option: str, value: int) -> None:
    if value < 64 * 1024:
        raise ConfigError(option, f"must be at least 64 KiB, got {value}")


def resolve_root(options: SlabOptions) -> Path:
    """The slab directory from ``options.path`` or ``$HICACHE_SLAB_PATH``; :class:`ConfigError` if neither."""
    return resolve_directory(options.path, PATH_ENV)


def io_thread_count(options: SlabOptions) -> int:
    """Threads a batch is spread over: ``options.io_threads``, else one per CPU up to four."""
    return options.io_threads if options.io_threads is not None else min(4, os.cpu_count() or 1)
