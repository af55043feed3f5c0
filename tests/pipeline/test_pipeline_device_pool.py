"""DeviceKVPool geometry and allocator."""

from __future__ import annotations

import pytest
import torch
from pipeline_support import make_device_pool

from hicache_storage import HostPoolError
from hicache_storage.pipeline import DeviceKVPool
from hicache_storage.pipeline.device_pool import page_view


@pytest.mark.parametrize(
    ("layout", "is_mla"),
    [(layout, mla) for layout in ("layer_first", "page_first", "page_first_direct") for mla in (False, True)]
    + [("page_head", False)],
)
def test_geometry_matches_a_host_pool(device: str, layout: str, is_mla: bool) -> None:
    pool = make_device_pool(device, num_pages=5, layout=layout, is_mla=is_mla)
    host = pool.host_pool(7)
    assert host.bytes_per_page == pool.bytes_per_page
    assert pool.kv_buffer.numel() * pool.kv_buffer.element_size() == 5 * pool.bytes_per_page
    assert pool.pages.shape[:2] == (host.segments_per_page, 5)
    assert DeviceKVPool.like(host, 3, device).bytes_per_page == pool.bytes_per_page
    # The page view of page 2 covers exactly the bytes the host pool calls page 2, in the same order.
    raw = host.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.arange(raw.numel()).remainder(251).to(torch.uint8))
    view = page_view(host.kv_buffer, 7, host.segments_per_page)[:, 2].contiguous().view(torch.uint8)
    assert bytes(view.reshape(-1).numpy()) == b"".join(bytes(s) for s in host.page_segments(2 * host.page_size))


def test_allocator_owner_tags_and_double_free() -> None:
    pool = make_device_pool(num_pages=4)
    tokens = pool.alloc(2 * pool.page_size, owner="a")
    assert tokens is not None and tokens.tolist() == list(range(2 * pool.page_size))
    assert pool.alloc(3 * pool.page_size) is None
    assert pool.owners() == {0: "a", 1: "a"}
    with pytest.raises(HostPoolError):
        pool.alloc(3)
    assert pool.free(tokens) == 2 * pool.page_size
    with pytest.raises(HostPoolError, match="double free"):
        pool.free(tokens)
    with pytest.raises(HostPoolError, match="page-aligned"):
        pool.free(tokens[1 : pool.page_size + 1])
    assert pool.free_pages == 4
    again = pool.alloc(3 * pool.page_size)  # freed pages come back ascending
    assert again is not None and again.tolist() == list(range(3 * pool.page_size))
