"""Turn host-pool pages and flat tensors into the memoryview lists backend primitives receive.

A page is handed to a primitive as ``list[memoryview]``: its segments in page byte order. Works
with :class:`~hicache_storage.host_pool.HostKVPool` (``page_segments``) and with any pool that
offers SGLang's ``get_page_buffer_meta`` (pointers wrapped with ctypes; no copy).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import torch

from .errors import InvalidRequestError

__all__ = ["PageBuffers", "page_nbytes", "pool_page_buffers", "tensor_page_buffer", "pool_page_bytes"]

#: One page as its segments, in page byte order.
PageBuffers = list[memoryview]


def page_nbytes(page: PageBuffers) -> int:
    """Total bytes of a page."""
    return sum(segment.nbytes for segment in page)


def pool_page_bytes(pool: Any) -> int:
    """Bytes per page of ``pool`` (ours or SGLang's)."""
    value = getattr(pool, "bytes_per_page", None)
    if isinstance(value, int):
        return value
    return int(pool.size_per_token) * int(pool.page_size)


def pool_page_buffers(pool: Any, starts: Sequence[int]) -> list[PageBuffers]:
    """Segments of the pages starting at token indices ``starts`` (writable, zero-copy)."""
    segments = getattr(pool, "page_segments", None)
    if segments is not None:
        return [segments(start) for start in starts]
    page_size = int(pool.page_size)
    indices: list[int] = []
    for start in starts:
        indices.extend(range(start, start + page_size))
    ptrs, sizes = pool.get_page_buffer_meta(torch.tensor(indices, dtype=torch.int64))
    per_page = len(ptrs) // max(len(starts), 1)
    pages: list[PageBuffers] = []
    for number in range(len(starts)):
        page: PageBuffers = []
        for ptr, size in zip(
            ptrs[number * per_page : (number + 1) * per_page],
            sizes[number * per_page : (number + 1) * per_page],
            strict=True,
        ):
            page.append(memoryview((ctypes.c_ubyte * int(size)).from_address(int(ptr))).cast("B"))
        pages.append(_flat_page_order(pool, page))
    return pages


def _flat_page_order(pool: Any, page: PageBuffers) -> PageBuffers:
    """Put a foreign pool's segments in the byte order of its flat page (``get_data_page``).

    SGLang's MHA ``layer_first`` pool lists a page's segments per layer as K0, V0, K1, V1, ...,
    while its flat page (and our :class:`~hicache_storage.host_pool.HostKVPool`) is all K layers
    then all V layers. Reordering keeps v0 and v1 writes, and both pools, byte-compatible.
    """
    is_mla = getattr(pool, "is_mla", None)
    if is_mla is None:
        is_mla = "MLA" in type(pool).__name__
    layers = getattr(pool, "layer_num", None)
    if getattr(pool, "layout", None) == "layer_first" and not is_mla and layers and len(page) == 2 * int(layers):
        return page[0::2] + page[1::2]
    return page


def tensor_page_buffer(tensor: Any, expected_bytes: int, what: str) -> PageBuffers:
    """A flat CPU tensor as a one-segment page; raises :class:`InvalidRequestError` on a size mismatch."""
    if not isinstance(tensor, torch.Tensor):
        raise InvalidRequestError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise InvalidRequestError(f"{what} must be a CPU tensor (got device {tensor.device})")
    if not tensor.is_contiguous():
        raise InvalidRequestError(f"{what} must be contiguous")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes != expected_bytes:
        raise InvalidRequestError(f"{what} holds {nbytes} bytes; a page of this pool holds {expected_bytes}")
    return [memoryview(tensor.view(-1).view(torch.uint8).numpy().data)]
