"""Pages as backend primitives receive them: ``list[memoryview]``, its segments in page byte order.

Host-pool pages become such lists in :mod:`hicache_storage.pools.buffers`; flat tensors (the v0
calls) here.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from .errors import InvalidRequestError

__all__ = ["PageBuffers", "memory_at", "page_nbytes", "tensor_page_buffer"]

#: One page as its segments, in page byte order.
PageBuffers = list[memoryview]


def page_nbytes(page: PageBuffers) -> int:
    """Total bytes of a page."""
    return sum(segment.nbytes for segment in page)


def tensor_page_buffer(tensor: Any, expected_bytes: int, what: str) -> PageBuffers:
    """A flat CPU tensor as a one-segment page; raises :class:`InvalidRequestError` on a size mismatch.

    The segment is a writable view of the tensor's memory that keeps the tensor alive while it lives.
    """
    if not isinstance(tensor, torch.Tensor):
        raise InvalidRequestError(f"{what} must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_cpu:
        raise InvalidRequestError(f"{what} must be a CPU tensor (got device {tensor.device})")
    if not tensor.is_contiguous():
        raise InvalidRequestError(f"{what} must be contiguous")
    nbytes = tensor.nbytes
    if nbytes != expected_bytes:
        raise InvalidRequestError(f"{what} holds {nbytes} bytes; a page of this pool holds {expected_bytes}")
    # a window on the tensor's memory: a quarter of the cost of torch's views and .numpy()
    return [memory_at(tensor.data_ptr(), nbytes, owner=tensor)]


def memory_at(address: int, nbytes: int, *, owner: object = None) -> memoryview:
    """A writable byte view of ``nbytes`` at ``address`` (no copy); the view keeps ``owner`` (what holds
    the memory) alive while it lives."""
    window = _window_type(nbytes).from_address(address)
    if owner is not None:
        vars(window)["owner"] = owner  # the view holds the window, the window the owner
    return memoryview(window).cast("B")


@functools.lru_cache(maxsize=64)
def _window_type(nbytes: int) -> type[ctypes.Array[ctypes.c_ubyte]]:
    return ctypes.c_ubyte * nbytes
