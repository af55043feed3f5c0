"""A backend's ``extra_config`` checked before anything is opened or created.

:func:`check_config` finds the backend class, checks the SDK's own keys and parses the backend's
options exactly as an instance would (unknown names, types, ranges), and returns the capabilities
such an instance would declare, all without connecting to or creating the store. Tools use it to
refuse a command the backend cannot serve (a listing on a backend that cannot list) and to check a
launch line before the engine starts (``hicache-storage sglang-args``).

A backend's options may name where the store lives on this host with a ``store_directory()``
method returning a :class:`~pathlib.Path` (``None`` when the store is not a local directory); the
operator commands then refuse a directory that does not exist instead of creating it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from .capabilities import Capabilities
from .config import SDK_OPTION_NAMES, make_config
from .errors import ConfigError
from .options import did_you_mean
from .registry import resolve_backend
from .settings import StorageSettings

__all__ = ["CheckedConfig", "check_config"]


@dataclass(frozen=True)
class CheckedConfig:
    """A configuration that passed :func:`check_config`: the backend class, its parsed options, and
    the capabilities an instance built from it declares."""

    backend: str
    backend_class: type[Any]
    options: Any
    capabilities: Capabilities

    def store_directory(self) -> Path | None:
        """The local directory the store lives in, when the backend's options name one."""
        locate = getattr(self.options, "store_directory", None)
        if not callable(locate):
            return None
        found = locate()
        return Path(found) if found is not None else None


def check_config(backend: str, extra: Mapping[str, Any] | None) -> CheckedConfig:
    """Check ``extra`` (an ``extra_config``) for ``backend`` without opening the store.

    Raises :class:`~hicache_storage.BackendLoadError` for an unknown backend and
    :class:`~hicache_storage.ConfigError` naming the first bad option (with the closest valid name
    for a mistyped one).
    """
    cls, _info = resolve_backend(backend)
    if extra is not None and not isinstance(extra, Mapping):
        raise ConfigError("extra_config", f"expected a dict (or None), got {type(extra).__name__}")
    values = dict(extra or {})
    options_cls: Any = cls.Options
    backend_names = {f.name for f in fields(options_cls) if f.init} if is_dataclass(options_cls) else set()
    for name in values:
        if not isinstance(name, str):
            raise ConfigError("extra_config", f"option names must be strings, got {name!r}")
        if name not in backend_names and name not in SDK_OPTION_NAMES:
            valid = ", ".join(sorted(backend_names)) or "none"
            hint = did_you_mean(name, backend_names | SDK_OPTION_NAMES)
            raise ConfigError(f"extra_config.{name}", f"unknown option{hint}; valid options of {backend}: {valid}")
    settings = StorageSettings.from_config(make_config("preflight", extra_config=values))  # the SDK's own keys
    options = settings.backend_options(options_cls)
    capabilities: Capabilities = cls.capabilities_for(options)
    return CheckedConfig(backend, cls, options, capabilities)
