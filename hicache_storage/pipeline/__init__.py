"""Reference buffer-only pipeline: device pool ⇄ host staging pool ⇄ storage.

Import what an engine needs from here::

    from hicache_storage.pipeline import BufferOnlyPipeline, PipelineConfig, DeviceKVPool, Span, PrefetchRequest

Hybrid models add sidecar components (``PoolSet``, ``SWAComponent``, ``MambaComponent``,
``DeviceStatePool``); tensor-parallel ranks agree through a ``RankSync`` (``ThreadRankGroup``).
Tools that drive storage or device pools beside the pipeline (the trace replay) also find here the
chunked multi-pool storage calls (``MultiPoolCalls``, ``PoolPart``) and the page helpers
(``page_view``, ``pages_to_tokens``).
"""

from __future__ import annotations

from .buffer_cache import BufferPageCache
from .components import Component, DeviceStatePool, KVComponent, MambaComponent, PoolSet, SWAComponent
from .config import HOST_MEMORY_MODES, WRITE_POLICIES, PipelineConfig
from .copy_engine import CopyEngine, CopyHandle
from .device_pool import DeviceKVPool, KVGeometry, page_view, pages_to_tokens
from .existence import StorageExistenceCache
from .lockstep import RankSync, ThreadRankGroup
from .metrics import PipelineMetrics
from .pipeline import BufferOnlyPipeline, InvariantViolation
from .storage_calls import MultiPoolCalls, PoolPart
from .types import Admission, BackupDecision, BackupResult, PrefetchRequest, PrefetchState, PrefetchStatus, Span

__all__ = [
    "HOST_MEMORY_MODES",
    "WRITE_POLICIES",
    "Admission",
    "BackupDecision",
    "BackupResult",
    "BufferOnlyPipeline",
    "BufferPageCache",
    "Component",
    "CopyEngine",
    "CopyHandle",
    "DeviceKVPool",
    "DeviceStatePool",
    "InvariantViolation",
    "KVComponent",
    "KVGeometry",
    "MambaComponent",
    "MultiPoolCalls",
    "PipelineConfig",
    "PipelineMetrics",
    "PoolPart",
    "PoolSet",
    "PrefetchRequest",
    "PrefetchState",
    "PrefetchStatus",
    "RankSync",
    "SWAComponent",
    "Span",
    "StorageExistenceCache",
    "ThreadRankGroup",
    "page_view",
    "pages_to_tokens",
]
