"""Backend discovery: in-process registrations first, then the ``hicache_storage.backends`` entry points.

Listing never imports a plugin's failure into the caller: a broken plugin shows up with its error.
Loading one raises :class:`BackendLoadError` naming the entry point, its distribution and version,
with the original error chained and an install hint.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from .capabilities import Capabilities
from .config import HiCacheStorageConfig
from .contract import HiCacheStorage, backend_class
from .errors import ApiVersionError, BackendLoadError
from .layers.stack import LayerFactory
from .plugin.backend import API_VERSION, Backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendInfo",
    "available_backends",
    "check_api_version",
    "import_object",
    "load_backend",
    "register_backend",
    "resolve_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "hicache_storage.backends"

_registered: dict[str, type[Backend[Any]] | str] = {}


@dataclass
class BackendInfo:
    """One discoverable backend. ``error`` is set when it cannot be loaded."""

    name: str
    target: str
    source: str  # "registered", "entry point" or "import path"
    distribution: str | None = None
    version: str | None = None
    api_version: str | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def describe(self) -> str:
        where = f"{self.distribution} {self.version}" if self.distribution else self.source
        return f"backend {self.name!r} ({self.target}, from {where})"


def register_backend(name: str, backend: type[Backend[Any]] | str, *, replace: bool = False) -> None:
    """Register a backend class (or ``"module:Class"`` string) under ``name`` in this process."""
    if not name or not isinstance(name, str):
        raise ValueError(f"backend name must be a non-empty str, got {name!r}")
    if name in _registered and not replace:
        raise ValueError(f"backend {name!r} is already registered; pass replace=True to override it")
    _registered[name] = backend


def unregister_backend(name: str) -> None:
    """Remove an in-process registration (no error if absent)."""
    _registered.pop(name, None)


def _entry_points(path: Sequence[str] | None) -> list[tuple[metadata.EntryPoint, str | None, str | None]]:
    dists: Iterable[metadata.Distribution] = (
        metadata.distributions(path=list(path)) if path is not None else metadata.distributions()
    )
    found: list[tuple[metadata.EntryPoint, str | None, str | None]] = []
    seen: set[tuple[str, str, str | None]] = set()
    for dist in dists:
        try:
            name = dist.metadata["Name"]
            version = dist.version
            eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        except Exception:  # a damaged .dist-info must not break discovery
            continue
        for ep in eps:
            marker = (ep.name, ep.value, name)
            if marker in seen:  # the same distribution visible twice on sys.path
                continue
            seen.add(marker)
            found.append((ep, name, version))
    return found


def check_api_version(plugin_version: object, *, host_version: str = API_VERSION, what: str = "backend") -> None:
    """Raise :class:`ApiVersionError` unless ``plugin_version`` has the host's major and a minor not newer."""
    try:
        major, minor = (int(part) for part in str(plugin_version).split("."))
        host_major, host_minor = (int(part) for part in host_version.split("."))
    except ValueError:
        raise ApiVersionError(f"{what} declares api_version {plugin_version!r}; expected 'MAJOR.MINOR'") from None
    if major < host_major:
        raise ApiVersionError(
            f"{what} targets hicache-storage API {plugin_version}, written against the old face (a subclass of "
            f"HiCacheStorage); this SDK provides {host_version}: implement hicache_storage.plugin.Backend instead "
            "(see 'Migrating from API 1' in docs/writing-a-backend.md), or install a plugin release built for this API"
        )
    if major != host_major or minor > host_minor:
        raise ApiVersionError(
            f"{what} targets hicache-storage API {plugin_version}, but this SDK provides {host_version}: "
            f"it needs major version {host_major} and minor version <= {host_minor}; "
            "upgrade hicache-storage or install a plugin release built for this API"
        )


def import_object(path: str, what: str = "backend class") -> Any:
    """The object a ``"module:Name"`` path names (``Name`` may be dotted).

    Raises :class:`BackendLoadError` naming ``what`` and the path for a malformed path or any import error.
    """
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise BackendLoadError(f"{what} {path!r} is not a 'module:Name' path")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise BackendLoadError(f"cannot import {what} {path!r}: {type(exc).__name__}: {exc}") from exc
    return obj


def _validate_class(obj: Any, describe: str) -> type[Backend[Any]]:
    cls = backend_class(obj, describe)
    check_api_version(cls.api_version, what=describe)
    return cls


def _candidates(name: str, path: Sequence[str] | None) -> list[tuple[metadata.EntryPoint, str | None, str | None]]:
    return [item for item in _entry_points(path) if item[0].name == name]


def resolve_backend(name: str, *, path: Sequence[str] | None = None) -> tuple[type[Backend[Any]], BackendInfo]:
    """Find and import the backend class for ``name`` (registered name, entry point or ``module:Class``)."""
    if name in _registered:
        target = _registered[name]
        info = BackendInfo(
            name, target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}", "registered"
        )
        try:
            cls = import_object(target) if isinstance(target, str) else target
        except Exception as exc:
            raise BackendLoadError(f"cannot import registered {info.describe()}: {exc}") from exc
        return _validate_class(cls, info.describe()), _with_class(info, cls)
    candidates = _candidates(name, path)
    distinct = {(ep.value, dist) for ep, dist, _ in candidates}
    if len(distinct) > 1:
        owners = ", ".join(sorted(f"{dist} {ver} ({ep.value})" for ep, dist, ver in candidates))
        raise BackendLoadError(
            f"backend name {name!r} is claimed by more than one distribution: {owners}; uninstall one of them"
        )
    if candidates:
        ep, dist, version = candidates[0]
        info = BackendInfo(name, ep.value, "entry point", dist, version)
        try:
            cls = ep.load()
        except Exception as exc:
            raise BackendLoadError(
                f"cannot load {info.describe()}: {type(exc).__name__}: {exc}. "
                f"Reinstall it (pip install --force-reinstall {dist}) or check its dependencies"
            ) from exc
        return _validate_class(cls, info.describe()), _with_class(info, cls)
    if ":" in name:
        info = BackendInfo(name, name, "import path")
        cls = import_object(name)
        return _validate_class(cls, info.describe()), _with_class(info, cls)
    known = ", ".join(sorted({i.name for i in available_backends(path=path)})) or "none installed"
    raise BackendLoadError(
        f"no backend named {name!r} (known: {known}). Install its plugin, e.g. "
        f"pip install hicache-storage-{name}, or pass a 'module:Class' path"
    )


def _with_class(info: BackendInfo, cls: Any) -> BackendInfo:
    info.api_version = str(getattr(cls, "api_version", None))
    caps = getattr(cls, "capabilities", None)
    if isinstance(caps, Capabilities):
        info.capabilities = caps.as_dict()
    return info


def available_backends(*, path: Sequence[str] | None = None, load: bool = False) -> list[BackendInfo]:
    """Every backend visible: registered ones, then entry points. Never raises for a broken plugin.

    With ``load=True`` each one is imported to report its api_version and capabilities (a failure
    becomes ``error``); otherwise duplicate names are still reported as errors.
    """
    infos: list[BackendInfo] = []
    for name, target in _registered.items():
        infos.append(
            BackendInfo(
                name, target if isinstance(target, str) else f"{target.__module__}:{target.__qualname__}", "registered"
            )
        )
    entries = _entry_points(path)
    by_name: dict[str, list[tuple[metadata.EntryPoint, str | None, str | None]]] = {}
    for item in entries:
        by_name.setdefault(item[0].name, []).append(item)
    for name, items in sorted(by_name.items()):
        for ep, dist, version in items:
            info = BackendInfo(name, ep.value, "entry point", dist, version)
            if len({(e.value, d) for e, d, _ in items}) > 1:
                info.error = "name claimed by: " + ", ".join(sorted(f"{d} {v}" for _, d, v in items))
            infos.append(info)
    if load:
        for info in infos:
            if info.error:
                continue
            try:
                if info.source == "entry point":
                    ep = next(e for e, d, _ in entries if e.name == info.name and d == info.distribution)
                    _with_class(info, _validate_class(ep.load(), info.describe()))
                else:
                    _with_class(info, resolve_backend(info.name, path=path)[0])
            except Exception as exc:
                info.error = f"{type(exc).__name__}: {exc}"
    return infos


def load_backend(
    name: str | type[Backend[Any]],
    config: HiCacheStorageConfig,
    *,
    resilience: bool = True,
    path: Sequence[str] | None = None,
    layers: Sequence[LayerFactory] = (),
) -> HiCacheStorage:
    """The caller API over backend ``name`` (a registered name, entry point, ``module:Class`` or the class).

    The resilience policy from ``extra_config["resilience"]`` stays on unless ``resilience=False``;
    ``layers`` go right over the backend (see :class:`~hicache_storage.HiCacheStorage`).
    """
    if isinstance(name, str):
        cls, _info = resolve_backend(name, path=path)
    else:
        cls = _validate_class(name, f"backend class {name!r}")
    return HiCacheStorage(cls, config, resilience=resilience, layers=layers)
