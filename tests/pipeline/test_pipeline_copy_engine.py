"""CopyEngine: page runs and byte-exact copies in both directions."""

from __future__ import annotations

import pytest
import torch
from pipeline_support import make_device_pool

from hicache_storage.pipeline import CopyEngine
from hicache_storage.pipeline.copy_engine import page_runs


def test_page_runs_merge_pages_consecutive_on_both_sides() -> None:
    assert page_runs([4, 5, 6, 9], [0, 1, 2, 3]) == [(4, 0, 3), (9, 3, 1)]
    assert page_runs([1, 2], [5, 3]) == [(1, 5, 1), (2, 3, 1)]
    assert page_runs([], []) == []


@pytest.mark.parametrize(
    ("layout", "is_mla"),
    [(layout, mla) for layout in ("layer_first", "page_first", "page_first_direct") for mla in (False, True)]
    + [("page_head", False)],
)
def test_round_trip_moves_exactly_the_named_pages(device: str, layout: str, is_mla: bool) -> None:
    pool = make_device_pool(device, num_pages=8, layout=layout, is_mla=is_mla)
    host = pool.host_pool(6)
    engine = CopyEngine(pool, host)
    generator = torch.Generator().manual_seed(0)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape, generator=generator).to(pool.dtype))
    before = host.kv_buffer.clone()
    device_pages, host_pages = [1, 2, 3, 7], [4, 5, 0, 2]
    engine.device_to_host(device_pages, host_pages).wait()
    for d, h in zip(device_pages, host_pages, strict=True):
        assert torch.equal(engine.host_pages[:, h], pool.pages[:, d].cpu())
    untouched = [p for p in range(6) if p not in host_pages]
    assert torch.equal(engine.host_pages[:, untouched], before.view(engine.host_pages.shape)[:, untouched])
    snapshot = pool.kv_buffer.clone()
    targets = [0, 4, 5, 6]
    handle = engine.host_to_device(host_pages, targets)
    handle.wait()
    assert handle.done()
    for d, h in zip(targets, host_pages, strict=True):
        assert torch.equal(pool.pages[:, d].cpu(), engine.host_pages[:, h])
    assert torch.equal(pool.pages[:, [1, 2, 3, 7]], snapshot.view(pool.pages.shape)[:, [1, 2, 3, 7]])


def test_mismatched_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="geometry"):
        CopyEngine(make_device_pool(), make_device_pool(layout="layer_first").host_pool(2))
