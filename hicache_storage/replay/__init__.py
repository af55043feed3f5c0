"""Trace replay: drive a storage backend with a Mooncake-format request trace and report hit rates and TTFT.

Modules: :mod:`.trace` (parser), :mod:`.pages` (page hashes and content), :mod:`.oracle` (infinite-cache
ceiling), :mod:`.prefix_cache` (LRU page cache), :mod:`.storage_io` (timed backend calls),
:mod:`.tiers` (host tier per mode), :mod:`.buffer_tier` (buffer-only), :mod:`.models` (model
geometries and presets), :mod:`.sidecars` and :mod:`.hybrid_cache` (hybrid models' sidecar pools),
:mod:`.config` (a run's settings), :mod:`.engine` (the serving model), :mod:`.report`, :mod:`.plots`;
the command is :mod:`hicache_storage.cli.replay`.
"""

from __future__ import annotations

from .config import MODES, EngineConfig, ModelShape
from .engine import ReplayEngine, run_replay
from .models import PRESETS, ModelPreset, SidecarSpec, load_model
from .oracle import HybridOracle, oracle_block_hits, oracle_hybrid, oracle_page_hits
from .report import ModeResult, RequestRecord, comparison_table
from .trace import TraceError, TraceRequest, parse_trace, read_trace

__all__ = [
    "MODES",
    "PRESETS",
    "EngineConfig",
    "HybridOracle",
    "ModeResult",
    "ModelPreset",
    "ModelShape",
    "ReplayEngine",
    "RequestRecord",
    "SidecarSpec",
    "TraceError",
    "TraceRequest",
    "comparison_table",
    "load_model",
    "oracle_block_hits",
    "oracle_hybrid",
    "oracle_page_hits",
    "parse_trace",
    "read_trace",
    "run_replay",
]
