"""Options of the slab backend (``extra_config`` keys) and how the storage directory is resolved."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from hicache_storage.plugin import ConfigError, resolve_directory
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["MIN_CAPACITY", "PATH_ENV", "REMOVED_OPTIONS", "SlabOptions", "io_thread_count", "resolve_root"]

#: Environment variable used when ``extra_config.path`` is not given.
PATH_ENV = "HICACHE_SLAB_PATH"
#: Smallest store (``capacity_bytes``): a small index and a few regions of data.
MIN_CAPACITY = 8 << 20
#: Options of the per-key-space layout that no longer exist, and what replaced them.
REMOVED_OPTIONS = {
    "pool_capacity_bytes": "capacity_bytes is now the size of the whole store at path, shared by every pool "
    "and key space (a pool takes space as it writes and gives it back when its pages are evicted)",
    "ways": "pages are no longer placed in sets: replacement is least recently used over the whole store",
    "choices": "pages are no longer placed in sets: replacement is least recently used over the whole store",
}


@dataclass(frozen=True)
class SlabOptions(IntegrityOptions):
    """The slab backend's options (``extra_config`` keys).

    - ``path``: directory of the store (default: ``$HICACHE_SLAB_PATH``);
    - ``capacity_bytes``: the whole store's size on disk (data files, index and lock files), shared by
      every key space and pool that uses ``path``; preallocated when the store is created;
    - ``region_bytes``: unit in which the data area is lent to page sizes (a power of two, 64 KiB..1 GiB;
      smaller stores use smaller regions, at most 1/8 of the data area);
    - ``index_bytes``: room of the index (``None``: sized at creation for the first page size seen);
    - ``file_bytes``: largest data file (a larger store is split over several files);
    - ``io_threads``: threads that move the pages of one batch (``None`` = ``min(4, CPU count)``);
    - ``direct_io``: move block-aligned pages with ``O_DIRECT`` where the file system allows it;
    - ``fsync``: make a batch durable before it is acknowledged (payloads synced before the index commits);
    - ``zero_fill``: write zeros over the data files once at creation (full speed from the first write);
    - ``read_recency_s``: a read hit on a page not made recent for this many seconds makes it recent
      again (``None``: replacement follows writes only);
    - ``quota_bytes``: most bytes this deployment's namespace may hold in the store (``None``: no quota);
    - ``integrity_secret_env`` / ``integrity_secret_file``: the secret that authenticates pages.
    """

    path: str | None = None
    capacity_bytes: int = 1 << 30
    region_bytes: int = 1 << 20
    index_bytes: int | None = None
    file_bytes: int = 64 << 30
    io_threads: int | None = None
    direct_io: bool = False
    fsync: bool = False
    zero_fill: bool = False
    read_recency_s: float | None = 1.0
    quota_bytes: int | None = None

    #: Options of the earlier per-key-space layout: naming one raises a ConfigError saying what replaced it.
    removed_options: ClassVar[Mapping[str, str]] = REMOVED_OPTIONS

    def __post_init__(self) -> None:
        if self.path is not None and not self.path.strip():
            raise ConfigError("extra_config.path", "must be a non-empty directory path")
        if self.capacity_bytes < MIN_CAPACITY:
            raise ConfigError(
                "extra_config.capacity_bytes", f"must be at least {MIN_CAPACITY} (8 MiB), got {self.capacity_bytes}"
            )
        region = self.region_bytes
        if region < 64 << 10 or region > 1 << 30 or region & (region - 1):
            raise ConfigError(
                "extra_config.region_bytes", f"must be a power of two from 65536 to 1073741824, got {region}"
            )
        if self.index_bytes is not None and not 2080 << 10 <= self.index_bytes <= self.capacity_bytes // 2:
            raise ConfigError(
                "extra_config.index_bytes",
                f"must be from 2129920 to half of capacity_bytes, or null, got {self.index_bytes}",
            )
        if self.file_bytes < 1 << 20:
            raise ConfigError("extra_config.file_bytes", f"must be at least 1 MiB, got {self.file_bytes}")
        if self.read_recency_s is not None and (
            isinstance(self.read_recency_s, bool) or not 0 <= self.read_recency_s <= 3600
        ):
            raise ConfigError(
                "extra_config.read_recency_s", f"must be seconds in [0, 3600] or null, got {self.read_recency_s!r}"
            )
        if self.io_threads is not None and not 1 <= self.io_threads <= 32:
            raise ConfigError("extra_config.io_threads", f"must be in [1, 32] or null, got {self.io_threads}")
        if self.quota_bytes is not None and not 0 < self.quota_bytes <= self.capacity_bytes:
            raise ConfigError(
                "extra_config.quota_bytes",
                f"must be positive and at most capacity_bytes, or null, got {self.quota_bytes}",
            )

    def store_directory(self) -> Path:
        """The store's directory (what operator commands check exists before opening the store)."""
        return resolve_root(self)


def resolve_root(options: SlabOptions) -> Path:
    """The store's directory from ``options.path`` or ``$HICACHE_SLAB_PATH``; :class:`ConfigError` if neither."""
    return resolve_directory(options.path, PATH_ENV)


def io_thread_count(options: SlabOptions) -> int:
    """Threads a batch is spread over: ``options.io_threads``, else one per CPU up to four."""
    return options.io_threads if options.io_threads is not None else min(4, os.cpu_count() or 1)
