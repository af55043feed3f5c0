"""Trace replay: drive a storage backend with a Mooncake-format request trace and report hit rates and TTFT.

Modules: :mod:`.trace` (parser), :mod:`.pages` (page hashes and content), :mod:`.oracle` (infinite-cache
ceiling), :mod:`.prefix_cache` (LRU page cache), :mod:`.storage_io` (timed backend calls),
:mod:`.tiers` (host tier per mode), :mod:`.buffer_tier` (buffer-only), :mod:`.models` (model
geometries and presets), :mod:`.sidecars` and :mod:`.hybrid_cache` (hybrid models' sidecar pools),
:mod:`.engine` (the serving model), :mod:`.report`, :mod:`.plots`, :mod:`.cli`.
"""

from __future__ import annotations

from .engine import EngineConfig, ReplayEngine, run_replay
from .models import PRESETS, ModelPreset, SidecarSpec, load_model
from .oracle import HybridOracle, oracle_block_hits, oracle_hybrid, oracle_page_hits
from .report import ModeResult, RequestRecord
from .trace import TraceError, TraceRequest, parse_trace, read_trace

__all__ = [
    "PRESETS",
    "EngineConfig",
    "HybridOracle",
    "ModeResult",
    "ModelPreset",
    "ReplayEngine",
    "RequestRecord",
    "SidecarSpec",
    "TraceError",
    "TraceRequest",
    "load_model",
    "oracle_block_hits",
    "oracle_hybrid",
    "oracle_page_hits",
    "parse_trace",
    "read_trace",
    "run_replay",
]
