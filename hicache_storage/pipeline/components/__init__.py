"""Pool components of the buffer-only pipeline, one module each.

- :mod:`.base`: what every component has (pools, hit rule, owner-tagged host units);
- :mod:`.kv`: the KV pool, the anchor (every page of a span; ``ALL_PAGES``);
- :mod:`.swa`: sliding-window KV (the trailing window of a span; ``TRAILING_PAGES``);
- :mod:`.mamba`: recurrent state (the state at a span's end; ``TRAILING_PAGES``, window 1).

:class:`PoolSet` is what :class:`~hicache_storage.pipeline.BufferOnlyPipeline` takes in place of a
single device pool: the device KV pool plus named sidecar components.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ...errors import ConfigError
from ..device_pool import DeviceKVPool
from .base import Component, Copier, DevicePool, UnitStaging
from .kv import KVComponent
from .mamba import DeviceStatePool, MambaComponent, StateCopyEngine
from .swa import SWAComponent

__all__ = [
    "Component",
    "Copier",
    "DevicePool",
    "DeviceStatePool",
    "KVComponent",
    "MambaComponent",
    "PoolSet",
    "SWAComponent",
    "StateCopyEngine",
    "UnitStaging",
]


@dataclass(frozen=True)
class PoolSet:
    """The device pools a pipeline moves: ``kv`` (the anchor) and ``sidecars`` (distinct names, not ``kv``)."""

    kv: DeviceKVPool
    sidecars: Sequence[Component] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.kv, DeviceKVPool):
            raise ConfigError("pools.kv", f"expected a DeviceKVPool, got {type(self.kv).__name__}")
        names: set[str] = set()
        for sidecar in self.sidecars:
            if not isinstance(sidecar, Component) or isinstance(sidecar, KVComponent):
                raise ConfigError("pools.sidecars", f"expected sidecar components, got {sidecar!r}")
            if sidecar.name in names or sidecar.name == "kv":
                raise ConfigError("pools.sidecars", f"component name {sidecar.name!r} is used twice (or is 'kv')")
            if sidecar.kv_aligned and sidecar.unit_tokens != self.kv.page_size:
                raise ConfigError(
                    f"component {sidecar.name!r}",
                    f"pages of {sidecar.unit_tokens} tokens do not line up with KV pages of {self.kv.page_size}",
                )
            names.add(sidecar.name)
        object.__setattr__(self, "sidecars", tuple(self.sidecars))

    @classmethod
    def of(cls, pools: PoolSet | DeviceKVPool) -> PoolSet:
        """``pools`` itself, or a KV-only set around a device KV pool."""
        return pools if isinstance(pools, PoolSet) else cls(pools)
