"""Support code for the hybrid (KV + SWA + Mamba) pipeline tests: pools, spans, content checks."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
from pipeline_support import FakeClock, fill, make_device_pool, sim_backend

from hicache_storage import HiCacheStorage
from hicache_storage.pipeline import BufferOnlyPipeline, DeviceKVPool, PipelineConfig, Span
from hicache_storage.pipeline.components import DeviceStatePool, MambaComponent, PoolSet, SWAComponent
from hicache_storage.pipeline.lockstep import RankSync

WINDOW = 2  # SWA window in pages


def make_state_device(num_slots: int = 8, device: str = "cpu") -> DeviceStatePool:
    return DeviceStatePool(
        num_slots=num_slots,
        layer_num=2,
        temporal_shape=(2, 4),
        conv_shapes=((3, 4),),
        temporal_dtype="float32",
        conv_dtype="bfloat16",
        device=device,
    )


def make_swa_device(num_pages: int = 16, device: str = "cpu") -> DeviceKVPool:
    return DeviceKVPool(
        num_pages=num_pages, page_size=4, layer_num=1, head_num=1, head_dim=8, dtype="bfloat16", device=device
    )


def hybrid_pools(
    *, device: str = "cpu", kv_pages: int = 16, swa_pages: int = 16, state_slots: int = 8, window: int = WINDOW
) -> PoolSet:
    return PoolSet(
        make_device_pool(device, kv_pages),
        [
            SWAComponent(make_swa_device(swa_pages, device), window_pages=window),
            MambaComponent(make_state_device(state_slots, device)),
        ],
    )


def make_hybrid(
    storage: HiCacheStorage | None = None,
    *,
    device: str = "cpu",
    kv_pages: int = 16,
    swa_pages: int = 16,
    state_slots: int = 8,
    window: int = WINDOW,
    rank_sync: RankSync | None = None,
    **options: Any,
) -> BufferOnlyPipeline:
    options.setdefault("record_decisions", True)
    pools = hybrid_pools(device=device, kv_pages=kv_pages, swa_pages=swa_pages, state_slots=state_slots, window=window)
    config = PipelineConfig(**options)
    return BufferOnlyPipeline(config, pools, storage or sim_backend(), clock=FakeClock(), rank_sync=rank_sync)


def sidecar(pipe: BufferOnlyPipeline, name: str) -> Any:
    return next(c for c in pipe.pools.sidecars if c.name == name)


def label(name: str, page_hash: str) -> str:
    """The content label of a sidecar unit (distinct from the KV page's)."""
    return f"{name}:{page_hash}"


def _pattern(text: str, nbytes: int) -> torch.Tensor:
    seed = hashlib.sha256(text.encode()).digest()
    return torch.frombuffer(bytearray(seed * -(-nbytes // 32)), dtype=torch.uint8)[:nbytes]


def _state_rows(pool: DeviceStatePool, slot: int) -> list[torch.Tensor]:
    return [segment[slot] for segment in pool.segments]


def fill_state(pool: DeviceStatePool, slot: int, text: str) -> None:
    rows = _state_rows(pool, slot)
    data = _pattern(text, sum(r.numel() * r.element_size() for r in rows)).to(pool.device)
    offset = 0
    for row in rows:
        size = row.numel() * row.element_size()
        row.view(torch.uint8).copy_(data[offset : offset + size])
        offset += size


def state_holds(pool: DeviceStatePool, slot: int, text: str) -> bool:
    rows = _state_rows(pool, slot)
    got = torch.cat([r.contiguous().view(torch.uint8).reshape(-1).cpu() for r in rows])
    return bool(torch.equal(got, _pattern(text, got.numel())))


def hybrid_span(
    pipe: BufferOnlyPipeline,
    span_id: int | str,
    hashes: Sequence[str],
    parent: str | None = None,
    *,
    with_swa: bool = True,
    with_mamba: bool = True,
) -> Span:
    """Device slots for the KV pages, the SWA trailing window and the end state, all filled."""
    kv = pipe.device_pool
    tokens = kv.alloc(len(hashes) * kv.page_size, owner=("engine", span_id))
    assert tokens is not None
    fill(kv, tokens, hashes)
    sidecars: dict[str, torch.Tensor] = {}
    if with_swa:
        swa = sidecar(pipe, "swa")
        window = list(hashes[-swa.window :])
        swa_tokens = swa.device.alloc(len(window) * swa.device.page_size, owner=("engine", span_id))
        assert swa_tokens is not None
        fill(swa.device, swa_tokens, [label("swa", h) for h in window])
        sidecars["swa"] = swa_tokens
    if with_mamba:
        mamba = sidecar(pipe, "mamba")
        slot = mamba.device.alloc(1, owner=("engine", span_id))
        assert slot is not None
        fill_state(mamba.device, int(slot[0]), label("mamba", hashes[-1]))
        sidecars["mamba"] = slot
    return Span(span_id, list(hashes), tokens, parent_hash=parent, sidecars=sidecars)


def free_engine(pipe: BufferOnlyPipeline, owner: object) -> None:
    """Free every device unit of every component held by ``owner``."""
    for component in pipe.components:
        pool = component.device
        units = [u for u, o in pool.owners().items() if o == owner]
        if units:
            step = pool.page_size
            pool.free([u * step + i for u in units for i in range(step)])


def assert_admitted(pipe: BufferOnlyPipeline, admission: Any, hashes: Sequence[str], end: int) -> None:
    """The admission holds KV ``hashes`` and, for prefix ``end`` of ``hashes``' chain, every sidecar's units."""
    from pipeline_support import assert_holds

    assert_holds(pipe.device_pool, admission.device_indices, list(admission.hashes))
    swa = sidecar(pipe, "swa")
    window = [label("swa", h) for h in hashes[max(0, end - swa.window) : end]]
    assert_holds(swa.device, admission.sidecars["swa"], window)
    slot = int(admission.sidecars["mamba"][0])
    assert state_holds(sidecar(pipe, "mamba").device, slot, label("mamba", hashes[end - 1]))
