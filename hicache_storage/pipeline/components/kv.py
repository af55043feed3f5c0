"""The KV component: the anchor pool whose page hashes define every prefix.

Rules: a backup writes every page of its span; restoring a prefix of ``end`` pages needs every
KV page the device does not hold (``[start, end)``); hit policy ``ALL_PAGES``. KV moves with the
v1 calls (``batch_set_v1`` / ``batch_get_v1`` / ``batch_exists``), as SGLang's engine moves it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ...host_pool import HostKVPool
from ...pools import PoolHitPolicy
from ..copy_engine import CopyEngine
from ..device_pool import DeviceKVPool
from .base import Component

__all__ = ["KVComponent"]


class KVComponent(Component):
    """The device KV pool as the pipeline's anchor component (pool name ``kv``)."""

    policy: ClassVar[PoolHitPolicy] = PoolHitPolicy.ALL_PAGES
    kind: ClassVar[str] = "kv"

    def __init__(self, device: DeviceKVPool, name: str = "kv") -> None:
        super().__init__(name, device, window=1)
        self.kv_pool = device

    def backup_positions(self, begin: int, end: int) -> range:
        """Every page of the span."""
        return range(begin, end)

    def restore_positions(self, start: int, end: int) -> range:
        """Every page beyond the device prefix."""
        return range(start, end)

    def min_transfer_units(self) -> int:
        """One page."""
        return 1

    def make_host_pool(self, units: int) -> HostKVPool:
        return self.kv_pool.host_pool(units)

    def copier(self, host_pool: Any) -> CopyEngine:
        return CopyEngine(self.kv_pool, host_pool)
