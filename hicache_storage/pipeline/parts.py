"""The components a pipeline's stages share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import PipelineConfig
from .copy_engine import CopyEngine
from .device_pool import DeviceKVPool
from .existence import StorageExistenceCache
from .metrics import PipelineMetrics
from .staging import HostStaging
from .storage_calls import StorageCalls

__all__ = ["StageParts"]


@dataclass(frozen=True)
class StageParts:
    """What the backup and prefetch stages of one pipeline share."""

    config: PipelineConfig
    device_pool: DeviceKVPool
    staging: HostStaging
    copier: CopyEngine
    storage: StorageCalls
    existence: StorageExistenceCache
    metrics: PipelineMetrics
    clock: Callable[[], float]
    log: Callable[..., Any]
