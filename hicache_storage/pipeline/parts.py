"""The components a pipeline's stages share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import PipelineConfig
from .copy_engine import CopyEngine
from .device_pool import DeviceKVPool
from .existence import StorageExistenceCache
from .lockstep import RankSync
from .metrics import PipelineMetrics
from .sidecars import Sidecars
from .staging import HostStaging
from .storage_calls import MultiPoolCalls

__all__ = ["Stage", "StageParts"]


@dataclass(frozen=True)
class StageParts:
    """What the backup and prefetch stages of one pipeline share."""

    config: PipelineConfig
    device_pool: DeviceKVPool
    staging: HostStaging
    copier: CopyEngine
    storage: MultiPoolCalls
    existence: StorageExistenceCache
    metrics: PipelineMetrics
    clock: Callable[[], float]
    log: Callable[..., Any]
    sidecars: Sidecars
    rank_sync: RankSync | None = None


class Stage:
    """Base of the backup and prefetch stages: unpacks the shared parts into attributes."""

    def __init__(self, parts: StageParts) -> None:
        self.config = parts.config
        self.device_pool = parts.device_pool
        self.staging = parts.staging
        self.copier = parts.copier
        self.storage = parts.storage
        self.existence = parts.existence
        self.metrics = parts.metrics
        self.clock = parts.clock
        self.log = parts.log
        self.sidecars = parts.sidecars
        self.rank_sync = parts.rank_sync
        self.page_size = parts.device_pool.page_size
        self.page_bytes = parts.device_pool.bytes_per_page
