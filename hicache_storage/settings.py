"""The SDK's own options from ``extra_config`` (``namespace``, ``model_revision``, ``manifests``,
``pinned``, ``resilience``, ``tp_lcm_size``, ``head_shards``, ``kv_heads``), and the backend's options
parsed beside them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import SDK_OPTION_NAMES, HiCacheStorageConfig
from .errors import ConfigError
from .options import parse_options
from .resilience import ResilienceOptions

__all__ = ["DEFAULT_IO_TIMEOUT_S", "StorageSettings", "check_config"]

#: Client I/O timeout (seconds) of a backend whose resilience policy is off.
DEFAULT_IO_TIMEOUT_S = 5.0

_CONFIG_FIELDS = ("tp_rank", "tp_size", "is_mla_model", "model_name", "extra_config")


def check_config(config: object) -> HiCacheStorageConfig:
    """``config`` if it is a :class:`HiCacheStorageConfig` (or SGLang's, same fields); else :class:`ConfigError`."""
    if not isinstance(config, HiCacheStorageConfig) and not all(hasattr(config, name) for name in _CONFIG_FIELDS):
        raise ConfigError("config", f"expected a HiCacheStorageConfig, got {type(config).__name__}")
    extra = config.extra_config  # type: ignore[attr-defined]
    if extra is not None and not isinstance(extra, dict):
        raise ConfigError("extra_config", f"expected a dict (or None), got {type(extra).__name__}")
    return config  # type: ignore[return-value]


def _flag(extra: dict[str, Any], name: str, default: bool) -> bool:
    value = extra.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"extra_config.{name}", f"expected true or false, got {value!r}")
    return value


def _count(extra: dict[str, Any], name: str) -> int | None:
    value = extra.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"extra_config.{name}", f"expected a positive int, got {value!r}")
    return value


def _lcm_size(config: HiCacheStorageConfig, extra: dict[str, Any]) -> int | None:
    """``tp_lcm_size`` from the config (where SGLang puts it) or ``extra_config``; ``tp_size`` must divide it."""
    value = getattr(config, "tp_lcm_size", None)
    if value is None or value == 0:
        value = _count(extra, "tp_lcm_size")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("tp_lcm_size", f"expected a positive int, got {value!r}")
    if value is not None and value % config.tp_size:
        raise ConfigError(
            "tp_lcm_size",
            f"tp_size={config.tp_size} does not divide tp_lcm_size={value}; "
            "tp_lcm_size must be a common multiple of every deployment's tp_size",
        )
    return value


def _text(extra: dict[str, Any], name: str) -> str:
    value = extra.get(name, "")
    if not isinstance(value, str):
        raise ConfigError(f"extra_config.{name}", f"expected a str, got {value!r}")
    return value


@dataclass(frozen=True)
class StorageSettings:
    """What ``extra_config`` says to the SDK, and the backend's own values (``backend_values``).

    - ``namespace`` / ``model_revision``: enter every key space;
    - ``manifests``: write a manifest per key space after writes (where the backend lists);
    - ``pinned``: this deployment's key spaces are skipped by age purges and the SDK's own eviction;
    - ``resilience``: the policy's options, ``None`` when turned off;
    - ``tp_lcm_size``: head shards per page (``None``: pages stay rank-local); ``head_shards``: whether
      splitting is on when ``tp_lcm_size`` is set (default true); ``kv_heads``: the model's global KV
      head count, where known (tells replicated heads apart; default ``head_num * tp_size``).
    """

    namespace: str
    model_revision: str
    manifests: bool
    pinned: bool
    resilience: ResilienceOptions | None
    backend_values: dict[str, Any]
    tp_lcm_size: int | None = None
    head_shards: bool = True
    kv_heads: int | None = None

    @classmethod
    def from_config(cls, config: object) -> StorageSettings:
        """Parse ``config.extra_config``; raises :class:`ConfigError` naming a bad SDK option."""
        checked = check_config(config)
        extra = dict(checked.extra_config or {})
        return cls(
            namespace=_text(extra, "namespace"),
            model_revision=_text(extra, "model_revision"),
            manifests=_flag(extra, "manifests", True),
            pinned=_flag(extra, "pinned", False),
            resilience=ResilienceOptions.from_config(extra.get("resilience")),
            backend_values={k: v for k, v in extra.items() if k not in SDK_OPTION_NAMES},
            tp_lcm_size=_lcm_size(checked, extra),
            head_shards=_flag(extra, "head_shards", True),
            kv_heads=_count(extra, "kv_heads"),
        )

    @property
    def io_timeout_s(self) -> float:
        """The resilience deadline when the policy is on, else :data:`DEFAULT_IO_TIMEOUT_S`."""
        return self.resilience.deadline_s if self.resilience is not None else DEFAULT_IO_TIMEOUT_S

    def backend_options(self, options_cls: type[Any]) -> Any:
        """The backend's ``Options`` parsed from :attr:`backend_values` (:class:`ConfigError` when bad)."""
        return parse_options(options_cls, self.backend_values)
