"""The serving model: requests in arrival order against a device prefix cache, a host tier and storage.

Each request: match its full pages in the device cache (an LRU over page-hash chains), let the host
tier load what follows (host hits, then storage hits), recompute the rest (the trailing partial page
always), keep the pages on the device, and back up the computed ones. Requests run one after another,
each finishing its loads and backups before the next arrives: the model measures what each tier can
hold, not queueing or contention. TTFT = recomputed tokens / prefill rate + load I/O time.

With a hybrid model (:mod:`.models`) a prefix is usable only where its sidecar state is too. The
device keeps states at checkpoints (the end of each computed run, every ``checkpoint_tokens``
inside it, and where a load ended), an LRU as large as the model's device state memory allows; a
device hit ends at the last checkpoint within the KV match, and the KV pages beyond it are
dropped and recomputed or loaded again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ..config import make_config
from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..pipeline import DeviceKVPool
from ..registry import load_backend
from .buffer_tier import BufferOnlyTier
from .config import MODES, EngineConfig, ModelShape
from .hybrid_cache import HybridCacheTier
from .kvdata import fill_pages, pool_bytes
from .oracle import oracle_hybrid, oracle_page_hits
from .pages import PageHasher
from .prefix_cache import PageLRU
from .report import ModeResult, RequestRecord
from .sidecars import Checkpoints, build_components, span_ends
from .storage_io import StorageIO, io_seconds, io_summary
from .tiers import CacheTier, HostTier, NoTier
from .trace import TraceRequest

__all__ = ["MODES", "EngineConfig", "ModelShape", "ReplayEngine", "run_replay"]


class ReplayEngine:
    """Runs requests through the model for one mode; ``backend`` is ``None`` only in mode ``none``."""

    def __init__(self, config: EngineConfig, backend: HiCacheStorage | None) -> None:
        if config.mode != "none" and backend is None:
            raise ValueError(f"mode {config.mode!r} needs a storage backend")
        self.config = config
        self.hasher = PageHasher(config.page_size, config.block_tokens)
        self.geometry = config.geometry()
        kv_shape = config.shape.pool_kwargs() if self.geometry is None else self.geometry.kv_pool_kwargs()
        geometry = {"page_size": config.page_size, "layout": "page_first", **kv_shape}
        self.device_pool = DeviceKVPool(num_pages=config.device_pages, **geometry)
        self.device_pool.alloc(self.device_pool.size, owner="cache")  # the device cache owns every page
        self.device = pool_bytes(self.device_pool)
        self.cache = PageLRU(config.device_pages)
        self.backend = backend
        self.tier: HostTier = NoTier()
        self.records: list[RequestRecord] = []
        self.units_loaded: Counter[str] = Counter()
        hybrid = self.geometry is not None and self.geometry.model.hybrid
        self.components = build_components(self.geometry) if self.geometry is not None and hybrid else []
        self.checkpoints = Checkpoints(self.geometry.device_checkpoints) if self.geometry is not None else None
        every = self.geometry.checkpoint_pages if self.geometry is not None else 0
        if config.mode == "none" or backend is None:
            return
        if config.mode == "cache":
            host = HostKVPool(num_pages=config.host_pages, pin_memory=False, **geometry)
            backend.register_mem_pool_host(host)
            if self.components:
                self.tier = HybridCacheTier(
                    self.device,
                    host,
                    StorageIO(backend, host),
                    backend,
                    components=self.components,
                    host_ratio=config.ratio,
                    checkpoint_pages=every,
                )
            else:
                storage = StorageIO(backend, host, pass_prefix_keys=config.pass_prefix_keys)
                self.tier = CacheTier(self.device, host, storage)
        else:
            self.tier = BufferOnlyTier(
                self.device,
                self.device_pool,
                backend,
                host_ratio=config.ratio,
                components=self.components,
                checkpoint_pages=every,
            )

    @property
    def page_bytes(self) -> int:
        return int(self.device_pool.bytes_per_page)

    def step(self, request: TraceRequest, hashes: list[str] | None = None) -> RequestRecord:
        """Serve one request (``hashes``: its page hashes, if already computed) and return its record."""
        page = self.config.page_size
        if hashes is None:
            hashes = self.hasher.hashes(request)
        hit = kv_match = self.cache.match(hashes)
        if self.components:
            assert self.checkpoints is not None
            hit = self.checkpoints.best(hashes, kv_match)  # a device hit needs the state at its end
            self.cache.discard(hashes[hit:kv_match])  # recomputed or loaded again from there
        self.cache.touch(hashes[:hit])
        slots = self.cache.reserve(len(hashes) - hit, protect=hashes[:hit])
        before = io_seconds(self.backend) if self.backend is not None else 0.0
        loaded = self.tier.load(hashes, hit, slots)
        load_seconds = io_seconds(self.backend) - before if self.backend is not None else 0.0
        ready = hit + loaded.host_pages + loaded.storage_pages
        kept = hit + len(slots)
        fill_pages(self.device, slots[ready - hit :], hashes[ready:kept])
        for page_hash, slot in zip(hashes[hit:kept], slots, strict=True):
            self.cache.insert(page_hash, slot)
        self.cache.touch(hashes[:kept])
        lost = 0
        if self.components:
            assert self.checkpoints is not None and self.geometry is not None
            if ready > hit:
                self.checkpoints.add(hashes, ready)
            for end in span_ends(ready, kept, self.geometry.checkpoint_pages):
                self.checkpoints.add(hashes, end)
            lost = max(0, max(kv_match, hit + loaded.kv_pages) - ready) * page
        self.tier.backup(hashes, ready, kept, slots[ready - hit :])
        recomputed = request.input_length - ready * page
        record = RequestRecord(
            index=request.index,
            timestamp_ms=request.timestamp_ms,
            input_tokens=request.input_length,
            device_tokens=hit * page,
            host_tokens=loaded.host_pages * page,
            storage_tokens=loaded.storage_pages * page,
            recomputed_tokens=recomputed,
            uncached_tokens=(len(hashes) - kept) * page,
            io_seconds=load_seconds,
            ttft_seconds=recomputed / self.config.prefill_tokens_per_s + load_seconds,
            lost_tokens=lost,
        )
        for key, count in loaded.units.items():
            self.units_loaded[key] += count
        self.records.append(record)
        return record


def run_replay(
    requests: Sequence[TraceRequest],
    config: EngineConfig,
    backend: str | None,
    backend_options: dict[str, Any] | None = None,
    *,
    clear: bool = True,
    progress: Callable[[int], None] | None = None,
) -> ModeResult:
    """Replay ``requests`` in one mode against a freshly loaded backend (cleared first when supported)."""
    instance: HiCacheStorage | None = None
    if config.mode != "none":
        if backend is None:
            raise ValueError(f"mode {config.mode!r} needs --backend")
        instance = load_backend(backend, make_config("replay", extra_config=dict(backend_options or {})))
    try:
        engine = ReplayEngine(config, instance)
        if instance is not None and clear and instance.capabilities.supports_clear:
            instance.clear()
        begin = time.perf_counter()
        all_hashes: list[list[str]] = []
        for number, request in enumerate(requests, start=1):
            all_hashes.append(engine.hasher.hashes(request))
            engine.step(request, all_hashes[-1])
            if progress is not None and (number % 64 == 0 or number == len(requests)):
                progress(64 if number % 64 == 0 else number % 64)
        wall = time.perf_counter() - begin
        oracle = oracle_page_hits(requests, engine.hasher, all_hashes)
        hybrid = None
        if engine.components and engine.geometry is not None:
            every = engine.geometry.checkpoint_pages
            hybrid = oracle_hybrid(
                requests,
                engine.hasher,
                all_hashes,
                engine.components,
                checkpoint_pages=every,
                device_pages=config.device_pages,
            )
        return ModeResult.build(
            config=config,
            backend=backend if instance is not None else None,
            records=engine.records,
            oracle=oracle,
            io=io_summary(instance) if instance is not None else None,
            gate_drops=dict(engine.tier.gate_drops),
            corrupt_pages=engine.tier.corrupt_pages,
            page_bytes=engine.page_bytes,
            host_pages=engine.tier.host_pool_pages,
            wall_seconds=wall,
            hybrid_oracle=hybrid,
            components=_component_summary(engine, instance),
        )
    finally:
        if instance is not None:
            instance.close()


def _component_summary(engine: ReplayEngine, backend: HiCacheStorage | None) -> dict[str, Any]:
    """Per sidecar: geometry (real and model unit bytes), units loaded by tier, host units, corrupt units."""
    geometry = engine.geometry
    if geometry is None:
        return {}
    if not engine.components:
        return {"_scale": geometry.scale}
    tier = engine.tier
    host_units: dict[str, int] = dict(getattr(tier, "host_units", {}))
    written: dict[str, int] = dict(getattr(tier, "units_written", {}))
    out: dict[str, Any] = {}
    for side, component in zip(geometry.sidecars, engine.components, strict=True):
        name = component.name
        out[name] = {
            "kind": side.spec.kind,
            "window_pages": side.window,
            "unit_bytes": side.real_unit_bytes,
            "model_unit_bytes": side.model_unit_bytes,
            "device_units": side.device_units,
            "host_units": host_units.get(name, 0),
            "units_from_host": engine.units_loaded.get(f"{name}/host", 0),
            "units_from_storage": engine.units_loaded.get(f"{name}/storage", 0),
            "units_written": written.get(name, 0),
        }
    out["_corrupt_units"] = int(getattr(tier, "corrupt_units", 0))
    out["_device_checkpoints"] = geometry.device_checkpoints
    out["_scale"] = geometry.scale
    return out
