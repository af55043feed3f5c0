"""The SWA component: sliding-window attention KV, a KV-shaped pool of its own.

Rules: a layer with a window of ``window`` pages attends only to the last ``window`` pages, so
restoring a prefix of ``end`` pages needs the SWA pages ``[end - window, end)`` (hit policy
``TRAILING_PAGES``) and a backup of a span writes only its trailing ``window`` pages. Windows end
on span boundaries: a prefix is restorable at a span end, not in the middle of a long span.
The smallest useful transfer is one window.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...errors import ConfigError
from ...host_pool import HostKVPool
from ..copy_engine import CopyEngine
from ..device_pool import DeviceKVPool
from .base import Component

__all__ = ["SWAComponent"]


class SWAComponent(Component):
    """Sliding-window KV in ``device`` (a :class:`DeviceKVPool` with the SWA layers' geometry)."""

    kind: ClassVar[str] = "swa"
    kv_aligned: ClassVar[bool] = True

    def __init__(self, device: DeviceKVPool, window_pages: int, name: str = "swa") -> None:
        if not isinstance(device, DeviceKVPool):
            raise ConfigError(f"component {name!r}", f"expected a DeviceKVPool, got {type(device).__name__}")
        super().__init__(name, device, window=window_pages)
        self.kv_pool = device

    def make_host_pool(self, units: int) -> HostKVPool:
        return self.kv_pool.host_pool(units)

    def copier(self, host_pool: Any) -> CopyEngine:
        return CopyEngine(self.kv_pool, host_pool)
