"""Options of the file backend (``extra_config`` keys) and how the storage root is resolved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hicache_storage.plugin import ConfigError, resolve_directory
from hicache_storage.plugin.page_format import IntegrityOptions

__all__ = ["MAX_FANOUT_LEVELS", "PATH_ENV", "FileOptions", "resolve_root"]

#: Environment variable used when ``extra_config.path`` is not given.
PATH_ENV = "HICACHE_FILE_PATH"
#: Deepest supported directory fan-out (each level is two hex digits: 256 directories).
MAX_FANOUT_LEVELS = 4


@dataclass(frozen=True)
class FileOptions(IntegrityOptions):
    """``path``: storage root (default: ``$HICACHE_FILE_PATH``); ``fanout_levels``: directory levels
    of two hex digits between the root and a page file (``None`` = the existing store's, else what
    fits ``max_bytes``: see :mod:`~hicache_storage_file.footprint`); ``fsync``: make every write
    durable before it is acknowledged; ``max_bytes``: size limit on the disk space of the page files
    this process knows of and their directories (``None`` = no limit), enforced by evicting the
    least recently written pages; ``io_threads``:
    threads that move the pages of one batch (``None`` = ``min(4, CPU count)``, 1 = the calling
    thread only); ``read_only``: serve reads from a root this process may not write (writes return
    ``False`` without trying, counted as ``read_only_writes_refused``; no delete or clear);
    ``integrity_secret_env`` / ``integrity_secret_file``: where the secret that authenticates page
    records is (see :class:`~hicache_storage.plugin.page_format.IntegrityOptions`)."""

    path: str | None = None
    fanout_levels: int | None = None
    fsync: bool = False
    max_bytes: int | None = None
    io_threads: int | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        if self.path is not None and not self.path.strip():
            raise ConfigError("extra_config.path", "must be a non-empty directory path")
        if self.fanout_levels is not None and not 0 <= self.fanout_levels <= MAX_FANOUT_LEVELS:
            raise ConfigError(
                "extra_config.fanout_levels", f"must be in [0, {MAX_FANOUT_LEVELS}], got {self.fanout_levels}"
            )
        if self.io_threads is not None and not 1 <= self.io_threads <= 32:
            raise ConfigError("extra_config.io_threads", f"must be in [1, 32] or null, got {self.io_threads}")
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise ConfigError("extra_config.max_bytes", f"must be a positive number of bytes, got {self.max_bytes}")
        if self.read_only and self.max_bytes is not None:
            raise ConfigError("extra_config.max_bytes", "a read_only backend never evicts: leave max_bytes unset")

    def store_directory(self) -> Path:
        """The storage root (what operator commands check exists before opening the store)."""
        return resolve_root(self)


def resolve_root(options: FileOptions) -> Path:
    """The storage root from ``options.path`` or ``$HICACHE_FILE_PATH``; :class:`ConfigError` if neither."""
    return resolve_directory(options.path, PATH_ENV)
