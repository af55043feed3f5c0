"""The state-slot host pool: slot images, zero-copy views, allocation with owners."""

from __future__ import annotations

import pytest
import torch

from hicache_storage import testing as kit
from hicache_storage.errors import HostPoolError
from hicache_storage.pools.buffers import pool_page_buffers
from hicache_storage.pools.host import pool_facts
from hicache_storage.pools.state_pool import HostStatePool


def test_slot_image_is_temporal_then_conv_and_round_trips() -> None:
    pool = kit.make_state_pool(4, seed=9)
    assert pool.page_size == 1 and pool_facts(pool).page_bytes == pool.size_per_token == sum(pool.component_bytes)
    image = pool.get_data_page(2)
    segments = pool.page_segments(2)
    assert [s.nbytes for s in segments] == pool.component_bytes
    assert bytes(image.numpy()) == b"".join(bytes(s) for s in segments)
    pool.set_from_flat_data_page(3, image)
    assert torch.equal(pool.get_data_page(3), image)
    with pytest.raises(HostPoolError, match="expected"):
        pool.set_from_flat_data_page(0, image[:-1])


def test_zero_copy_views_are_the_pool_memory() -> None:
    pool = kit.make_state_pool(4, seed=1)
    (views,) = pool_page_buffers(pool, [1])
    views[0][:] = bytes(views[0].nbytes)
    assert not pool.temporal_buffer[1].any()
    ptrs, sizes = pool.get_page_buffer_meta([1])
    assert ptrs[0] == pool.temporal_buffer[1].data_ptr() and sizes == pool.component_bytes


def test_alloc_records_owners_and_refuses_double_free() -> None:
    pool = HostStatePool(num_slots=3, layer_num=1)
    taken = pool.alloc(2, owner="req-1")
    assert taken is not None and pool.alloc(2) is None and pool.available_size() == 1
    assert pool.owners() == {int(i): "req-1" for i in taken} and pool.owner_of(int(taken[0])) == "req-1"
    pool.free(taken[:1])
    with pytest.raises(HostPoolError, match="already free"):
        pool.free(taken[:1])
    with pytest.raises(HostPoolError, match="not allocated"):
        pool.owner_of(int(taken[0]))
    with pytest.raises(HostPoolError, match="outside the pool"):
        pool.page_segments(3)
