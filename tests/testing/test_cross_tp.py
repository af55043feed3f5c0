"""The cross-TP test kit: a rank's heads go into a host pool of any layout and come back unchanged."""

from __future__ import annotations

import pytest
import torch

from hicache_storage.testing.cross_tp import expected_heads, fill_rank, global_kv, rank_heads, rank_pool


@pytest.mark.parametrize("layout", ["page_head", "page_first", "layer_first", "page_first_direct"])
def test_fill_rank_and_rank_heads_round_trip_every_layout(layout):
    kv = global_kv(3, heads=8, seed=2)
    pool = rank_pool(kv, 4, layout, num_pages=4)
    assert pool.head_num == 2 and pool.layout == layout
    fill_rank(pool, kv, 3, 4, pages=range(1, 4))
    for slot in range(3):
        got = rank_heads(pool, 1 + slot).view(torch.uint8)
        assert torch.equal(got, expected_heads(kv, slot, 3, 4).view(torch.uint8))
    assert not rank_heads(pool, 0).view(torch.uint8).any()  # page 0 was not filled


def test_expected_heads_are_the_rank_slice_of_the_global_heads():
    kv = global_kv(1, heads=8)
    assert torch.equal(expected_heads(kv, 0, 1, 2).view(torch.uint8), kv[0][..., 4:8, :].view(torch.uint8))
    assert torch.equal(expected_heads(kv, 0, 0, 1).view(torch.uint8), kv[0].view(torch.uint8))
