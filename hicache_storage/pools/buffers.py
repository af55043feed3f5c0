"""A host pool's pages as the segment lists primitives receive (zero-copy views where the pool allows).

Works with pools that offer ``page_segments`` (this SDK's) and with any pool that offers SGLang's
``get_page_buffer_meta`` (pointers wrapped as byte views; no copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..page_buffers import PageBuffers, memory_at
from .host import PoolFacts, pool_facts

__all__ = ["pool_page_buffers"]


def pool_page_buffers(pool: Any, starts: Sequence[int], facts: PoolFacts | None = None) -> list[PageBuffers]:
    """Writable, zero-copy segments of the pages starting at slot indices ``starts``."""
    facts = facts or pool_facts(pool)
    if facts.segments is not None:
        return [facts.segments(start) for start in starts]
    page_size = facts.page_size
    indices: list[int] = []
    for start in starts:
        indices.extend(range(start, start + page_size))
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor(indices, dtype=torch.int64))
    per_page = len(ptrs) // max(len(starts), 1)
    pages: list[PageBuffers] = []
    for number in range(len(starts)):
        span = slice(number * per_page, (number + 1) * per_page)
        page: PageBuffers = [
            memory_at(int(ptr), int(size), owner=pool) for ptr, size in zip(ptrs[span], sizes[span], strict=True)
        ]
        pages.append(_flat_page_order(facts, page))
    return pages


def _flat_page_order(facts: PoolFacts, page: PageBuffers) -> PageBuffers:
    """Put a foreign pool's segments in the byte order of its flat page (``get_data_page``).

    SGLang's MHA ``layer_first`` pool lists a page's segments per layer as K0, V0, K1, V1, ...,
    while its flat page (and our :class:`~hicache_storage.host_pool.HostKVPool`) is all K layers
    then all V layers. Reordering keeps v0 and v1 writes, and both pools, byte-compatible.
    """
    layers = facts.layer_num
    if facts.layout == "layer_first" and not facts.is_mla and layers and len(page) == 2 * layers:
        return page[0::2] + page[1::2]
    return page
