"""The backend under test: its class, how it is reached (SDK or SGLang surface) and what it declares."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from typing import Any

from hicache_storage import (
    BackendInfo,
    BackendLoadError,
    Capabilities,
    ConfigError,
    HiCacheStorage,
    load_backend,
    make_config,
    resolve_backend,
)
from hicache_storage.plugin import Backend
from hicache_storage.testing import import_object
from hicache_storage.testing.layers import LayerFactory, capability_overrides

__all__ = [
    "SGLANG_REQUIRED",
    "V2_METHODS",
    "BackendUnderTest",
    "cached_target",
    "parse_capability_overrides",
    "resolve_target",
]

#: Methods a class must define to be tested through SGLang's surface.
SGLANG_REQUIRED = ("get", "batch_get", "set", "batch_set", "exists")
#: Methods of the multi-pool (v2) surface (the ``multi_pool`` category needs them).
V2_METHODS = ("register_mem_host_pool_v2", "batch_get_v2", "batch_set_v2", "batch_exists_v2")


@dataclass
class BackendUnderTest:
    """A resolved backend.

    ``sdk`` is ``True`` when the class implements :class:`hicache_storage.plugin.Backend` and is
    tested through the SDK's caller API; ``False`` for a class tested only through SGLang's surface
    (the "SGLang tier", such as SGLang's own ``HiCacheFile``).
    ``capabilities`` are the declared ones with ``overrides`` applied; tests gate on them.
    """

    name: str
    cls: type[Any]
    sdk: bool
    declared: Capabilities
    overrides: dict[str, Any] = field(default_factory=dict)
    info: BackendInfo | None = None

    @property
    def capabilities(self) -> Capabilities:
        """Declared capabilities with the overrides applied."""
        return self.declared.with_overrides(self.overrides)

    @property
    def tier(self) -> str:
        """``"sdk"`` or ``"sglang"``."""
        return "sdk" if self.sdk else "sglang"

    @property
    def _surface(self) -> type[Any]:
        """The class whose methods the tests call: the SDK's caller API for a Backend, else the class itself."""
        return HiCacheStorage if issubclass(self.cls, Backend) else self.cls

    @property
    def has_v1(self) -> bool:
        """Whether the zero-copy v1 calls are available (always, through the SDK's caller API)."""
        return all(callable(getattr(self._surface, name, None)) for name in ("batch_get_v1", "batch_set_v1"))

    @property
    def has_v2(self) -> bool:
        """Whether the multi-pool (v2) calls and sidecar registration are defined (always on the SDK surface)."""
        return all(callable(getattr(self._surface, name, None)) for name in V2_METHODS)

    def construct(self, config: Any, layers: Sequence[LayerFactory] = ()) -> Any:
        """Build an instance: the caller API over a :class:`~hicache_storage.plugin.Backend` class (on the SDK
        surface with the capability overrides and ``layers`` right over it); SGLang's ``cls(config, extra_config)``
        for a class written against SGLang's surface."""
        if isinstance(self.cls, type) and issubclass(self.cls, Backend):
            extra = [capability_overrides(self.overrides)] if self.overrides and self.sdk else []
            return load_backend(self.cls, config, layers=[*layers, *extra] if self.sdk else [])
        params = [
            p
            for p in inspect.signature(self.cls).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        ]
        if len(params) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
            return self.cls(config, dict(config.extra_config or {}))
        if len(params) == 1:
            return self.cls(config)
        return self.cls()

    def probe(self, options: dict[str, Any], *, strict: bool = False) -> Capabilities:
        """Capabilities of an instance built with ``options`` (they may depend on options).

        When the instance cannot be built: the declared capabilities, or with ``strict`` the error
        (a :class:`ConfigError` naming the option for a bad or missing option).
        """
        try:
            backend = self.construct(make_config("conformance-probe", extra_config=options))
        except Exception:
            if strict:
                raise
            return self.declared
        try:
            caps = getattr(backend, "capabilities", None)
            return caps if isinstance(caps, Capabilities) else self.declared
        finally:
            close = getattr(backend, "close", None)
            if callable(close):
                close()

    def describe(self, capabilities: Capabilities | None = None) -> dict[str, Any]:
        """Header facts for reports (``capabilities``: effective ones if probed)."""
        info = self.info
        distribution, version = (info.distribution, info.version) if info else (None, None)
        if distribution is None:
            distribution, version = _distribution_of(self.cls.__module__)
        return {
            "backend": self.name,
            "class": f"{self.cls.__module__}:{self.cls.__qualname__}",
            "entry_point": info.target if info and info.source == "entry point" else None,
            "distribution": distribution,
            "version": version,
            "api_version": str(getattr(self.cls, "api_version", "n/a (SGLang surface)")),
            "tier": self.tier,
            "capabilities": (capabilities or self.declared).as_dict(),
            "capability_overrides": dict(self.overrides),
        }


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    top = module.partition(".")[0]
    try:
        names = metadata.packages_distributions().get(top) or []
        return (names[0], metadata.version(names[0])) if names else (None, None)
    except Exception:
        return None, None


def parse_capability_overrides(items: list[str]) -> dict[str, Any]:
    """``["persistent=true", "max_batch_size=16"]`` → dict; raises :class:`ConfigError` on bad items."""
    names = set(Capabilities().as_dict())
    result: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError("--capability-override", f"expected NAME=VALUE, got {item!r}")
        if name not in names:
            raise ConfigError(f"--capability-override {name}", f"unknown capability; expected one of {sorted(names)}")
        value = raw.strip().lower()
        if value in ("true", "yes", "1", "on") and name not in ("max_batch_size", "max_page_bytes"):
            result[name] = True
        elif value in ("false", "no", "0", "off") and name not in ("max_batch_size", "max_page_bytes"):
            result[name] = False
        elif name in ("max_batch_size", "max_page_bytes"):
            if value in ("none", "null") and name == "max_page_bytes":
                result[name] = None
                continue
            try:
                result[name] = int(value)
            except ValueError:
                raise ConfigError(f"--capability-override {name}", f"expected an integer, got {raw!r}") from None
            if result[name] < 1:
                raise ConfigError(f"--capability-override {name}", f"must be >= 1, got {raw!r}")
        else:
            raise ConfigError(f"--capability-override {name}", f"expected true or false, got {raw!r}")
    return result


def _sglang_target(name: str, cls: Any, overrides: dict[str, Any], info: BackendInfo | None) -> BackendUnderTest:
    if not isinstance(cls, type):
        raise BackendLoadError(f"{name!r} is {cls!r}, not a class")
    surface = HiCacheStorage if issubclass(cls, Backend) else cls  # a Backend runs behind the SDK's caller API
    missing = [m for m in SGLANG_REQUIRED if not callable(getattr(surface, m, None))]
    if missing:
        raise BackendLoadError(
            f"{name!r} ({cls.__module__}:{cls.__qualname__}) is neither a hicache_storage.plugin.Backend subclass "
            f"nor a class with SGLang's storage surface: it lacks {', '.join(missing)}"
        )
    declared = getattr(cls, "capabilities", None)
    if not isinstance(declared, Capabilities):
        declared = Capabilities()
    return BackendUnderTest(name, cls, False, declared, overrides, info)


def resolve_target(
    backend: str | type[Any],
    *,
    sglang: bool | None = None,
    overrides: dict[str, Any] | None = None,
) -> BackendUnderTest:
    """Resolve ``backend`` (entry-point name, ``module:Class`` or a class).

    ``sglang=None`` picks the tier from the class (SGLang surface when it does not implement
    :class:`~hicache_storage.plugin.Backend`); ``True`` forces the SGLang surface. Raises :class:`BackendLoadError`
    with the registry's message when the backend cannot be found or loaded.
    """
    overrides = dict(overrides or {})
    Capabilities().with_overrides(overrides)  # unknown names fail early with ConfigError
    if isinstance(backend, type):
        name = f"{backend.__module__}:{backend.__qualname__}"
        if issubclass(backend, Backend) and not sglang:
            return BackendUnderTest(name, backend, True, backend.capabilities, overrides)
        return _sglang_target(name, backend, overrides, None)
    if not isinstance(backend, str) or not backend:
        raise BackendLoadError(f"backend must be an entry-point name, 'module:Class' or a class, got {backend!r}")
    if ":" in backend:
        cls = import_object(backend)
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            return _sglang_target(backend, cls, overrides, BackendInfo(backend, backend, "import path"))
    cls, info = resolve_backend(backend)
    if sglang:
        return _sglang_target(backend, cls, overrides, info)
    return BackendUnderTest(backend, cls, True, cls.capabilities, overrides, info)


@lru_cache(maxsize=64)
def cached_target(backend: Any, sglang: bool | None, overrides: tuple[tuple[str, Any], ...]) -> BackendUnderTest:
    """:func:`resolve_target`, cached (the suite resolves the backend once per test)."""
    return resolve_target(backend, sglang=sglang, overrides=dict(overrides))
