"""The host pool of the storage benchmarks: pages of 512 KiB filled with seeded random bytes."""

from __future__ import annotations

import torch

from hicache_storage import HostKVPool

PAGE_SIZE = 32  # tokens; 4 layers x 8 heads x 128 dims x bf16 x (K, V) x 32 tokens = 512 KiB


def make_pool(pages: int, seed: int = 0) -> HostKVPool:
    """A page-first bf16 pool of ``pages`` pages of 512 KiB, filled with random bytes from ``seed``."""
    pool = HostKVPool(
        num_pages=pages,
        page_size=PAGE_SIZE,
        layer_num=4,
        head_num=8,
        head_dim=128,
        dtype="bfloat16",
        layout="page_first",
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)))
    return pool
