"""Pipeline configuration with SGLang's HiCache option names and rules.

:class:`PipelineConfig` is shared by every host-tier model: the buffer-only pipeline reads it, and a
``cache``-mode host tier can read the same object (``host_memory_mode``, write policy, ratio).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError

__all__ = ["HOST_MEMORY_MODES", "WRITE_POLICIES", "PipelineConfig"]

HOST_MEMORY_MODES = ("cache", "buffer_only")
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
_DEFAULT_RATIO = {"cache": 2.0, "buffer_only": 1.2}


@dataclass(frozen=True)
class PipelineConfig:
    """Host-tier options. Validation happens at construction; bad values raise :class:`ConfigError`.

    - ``host_memory_mode``: ``"buffer_only"`` (host memory only stages transfers) or ``"cache"``.
    - ``write_policy``: ``write_through`` (back up every span offered), ``write_through_selective``
      (only spans whose ``hit_count`` reaches ``write_through_threshold``) or ``write_back``
      (refused in ``buffer_only``: nothing would hold the only copy of an evicted page).
    - ``host_to_device_ratio``: host pool size relative to the device pool; ``None`` means 1.2 in
      ``buffer_only`` and 2.0 in ``cache`` (SGLang's defaults).
    - ``storage_backend`` / ``storage_options``: registry name and ``extra_config`` of the backend,
      for callers that build it from the configuration (``load_backend(config.storage_backend,
      make_config(extra_config=config.storage_options))``); the pipeline itself takes a backend
      object and needs one in ``buffer_only``.
    - ``backlog_cap_tokens``: most tokens of admitted, not yet written backups; ``None`` means
      2 x device pool tokens. Reaching it means the engine offers more than storage absorbs.
    - ``storage_batch_pages``: most pages per storage call (SGLang: 128).
    - ``prefetch_timeout_ticks``: a prefetch parked or staged this many ticks is released.
    - ``retain_staged_pages``: keep staged pages in a :class:`BufferPageCache` after use.
    - ``existence_cache_entries``: capacity of the :class:`StorageExistenceCache`.
    - ``pool_name``: pool label used in existence beliefs (one pipeline per pool).
    - ``record_decisions``: keep a log of every admission, drop and staging decision.
    """

    host_memory_mode: str = "buffer_only"
    write_policy: str = "write_through"
    host_to_device_ratio: float | None = None
    storage_backend: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    write_through_threshold: int = 2
    backlog_cap_tokens: int | None = None
    storage_batch_pages: int = 128
    prefetch_timeout_ticks: int = 100
    retain_staged_pages: bool = False
    existence_cache_entries: int = 128 * 1024
    pool_name: str = "kv"
    record_decisions: bool = False

    def __post_init__(self) -> None:
        if self.host_memory_mode not in HOST_MEMORY_MODES:
            raise ConfigError(
                "host_memory_mode", f"unknown mode {self.host_memory_mode!r}; expected one of {list(HOST_MEMORY_MODES)}"
            )
        if self.write_policy not in WRITE_POLICIES:
            raise ConfigError(
                "write_policy", f"unknown policy {self.write_policy!r}; expected one of {list(WRITE_POLICIES)}"
            )
        if self.host_memory_mode == "buffer_only" and self.write_policy == "write_back":
            raise ConfigError(
                "write_policy",
                "write_policy='write_back' cannot be combined with host_memory_mode='buffer_only': "
                "host memory holds no cache copy to write back from; use write_through or write_through_selective",
            )
        ratio = self.host_to_device_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0):
            raise ConfigError("host_to_device_ratio", f"must be a positive number, got {ratio!r}")
        for name in ("write_through_threshold", "storage_batch_pages", "prefetch_timeout_ticks"):
            _positive_int(name, getattr(self, name))
        _positive_int("existence_cache_entries", self.existence_cache_entries)
        if self.backlog_cap_tokens is not None:
            _positive_int("backlog_cap_tokens", self.backlog_cap_tokens)
        if not isinstance(self.storage_options, dict):
            raise ConfigError("storage_options", f"must be a dict, got {type(self.storage_options).__name__}")
        if not isinstance(self.pool_name, str) or not self.pool_name:
            raise ConfigError("pool_name", f"must be a non-empty str, got {self.pool_name!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PipelineConfig:
        """Build from a plain dict (a JSON file, a CLI); unknown keys raise :class:`ConfigError`."""
        known = {f.name for f in fields(cls)}
        for name in values:
            if name not in known:
                raise ConfigError(name, f"unknown pipeline option; expected one of {sorted(known)}")
        return cls(**values)

    @property
    def ratio(self) -> float:
        """Effective host/device size ratio."""
        if self.host_to_device_ratio is not None:
            return float(self.host_to_device_ratio)
        return _DEFAULT_RATIO[self.host_memory_mode]

    def host_pages_for(self, device_pages: int) -> int:
        """Host pool pages for a device pool of ``device_pages`` pages (at least one)."""
        return max(1, math.ceil(device_pages * self.ratio))

    def backlog_cap_for(self, device_tokens: int) -> int:
        """Backlog cap in tokens for a device pool of ``device_tokens`` tokens."""
        return self.backlog_cap_tokens if self.backlog_cap_tokens is not None else 2 * device_tokens

    def require_storage(self, has_storage: bool) -> None:
        """Raise :class:`ConfigError` if ``buffer_only`` is asked for without a storage backend."""
        if self.host_memory_mode == "buffer_only" and not has_storage:
            raise ConfigError(
                "storage_backend",
                "host_memory_mode='buffer_only' requires a storage backend: pass one to the pipeline "
                "(hicache_storage.load_backend builds one from storage_backend and storage_options)",
            )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, f"must be a positive int, got {value!r}")
