"""Whole pages of a pool handed out by token index with an owner tag, and page/token index conversion.

:class:`PageAllocator` is the allocator the host KV pool, the state pool and the device pools
share: a :class:`~hicache_storage.free_list.FreeList` of page numbers under a lock, offered as
SGLang's token-index calls (``alloc``, ``free``, ``available_size``) and as page-number calls.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from .errors import HostPoolError
from .free_list import FreeList

__all__ = ["PageAllocator", "pages_to_tokens", "tokens_to_pages"]


class PageAllocator:
    """Whole pages of a pool handed out with an owner tag, taken back only while allocated.

    A pool sets ``page_size`` (slots per page), ``page_num`` and ``size`` (``page_num * page_size``)
    and then calls :meth:`_init_allocator`. Token indices are page aligned (a state pool has pages
    of one slot). Pages come out in ascending order when the free list allows it; freed pages are
    the next to go, lowest first. Every call is thread-safe.
    """

    page_size: int
    page_num: int
    size: int
    #: What a page is called in error messages.
    unit_name: ClassVar[str] = "pages"

    def _init_allocator(self) -> None:
        self._slots = FreeList(self.page_num, self.unit_name)
        self._alloc_lock = threading.Lock()

    # ----------------------------------------------------------- hooks
    def _page_number(self, index: int) -> int:
        """Page number of the page starting at slot ``index``; raises :class:`HostPoolError` unless one starts there."""
        value = int(index)
        if value % self.page_size or not 0 <= value < self.size:
            raise HostPoolError(
                f"token index {value} is not the start of a page "
                f"(expected a multiple of page_size={self.page_size} in [0, {self.size}))"
            )
        return value // self.page_size

    def _page_numbers(self, indices: Sequence[int] | torch.Tensor) -> list[int]:
        """Page numbers of ``indices`` (token indices of whole pages); raises :class:`HostPoolError` if they are not."""
        return tokens_to_pages(indices, self.page_size, self.size)

    # ----------------------------------------------------------- counts
    @property
    def free_pages(self) -> int:
        """Pages not allocated."""
        return self._slots.free

    @property
    def used_pages(self) -> int:
        """Pages allocated."""
        return self._slots.used

    def available_size(self) -> int:
        """Free capacity in slots (SGLang's name)."""
        return self._slots.free * self.page_size

    # ----------------------------------------------------------- by token index
    def alloc(self, num_tokens: int, owner: object = None) -> torch.Tensor | None:
        """Token indices of ``num_tokens // page_size`` whole pages, or ``None`` when too few are free."""
        if num_tokens < 0 or num_tokens % self.page_size:
            raise HostPoolError(f"alloc({num_tokens}): expected a non-negative multiple of page_size={self.page_size}")
        pages = self.alloc_pages(num_tokens // self.page_size, owner)
        return None if pages is None else pages_to_tokens(pages, self.page_size)

    def free(self, indices: Sequence[int] | torch.Tensor) -> int:
        """Return the pages of ``indices`` (token indices); returns slots freed.

        A page that is not allocated, or named twice, raises :class:`HostPoolError` and nothing is freed.
        """
        return self.release_pages(self._page_numbers(indices))

    def owner_of(self, index: int) -> object:
        """Owner recorded at allocation for the page starting at slot ``index`` (raises if it is free)."""
        page = self._page_number(index)
        with self._alloc_lock:
            return self._slots.owner(page, f"the page at index {index}")

    # ----------------------------------------------------------- by page number
    def alloc_pages(self, count: int, owner: object = None) -> list[int] | None:
        """Page numbers of ``count`` whole pages (what :meth:`alloc` hands out), or ``None`` when too few are free."""
        with self._alloc_lock:
            return self._slots.alloc(count, owner)

    def release_pages(self, pages: Sequence[int]) -> int:
        """Return pages by page number (what :meth:`alloc_pages` hands out); returns slots freed.

        A page that is not allocated, or named twice, raises :class:`HostPoolError` and nothing is freed.
        """
        with self._alloc_lock:
            self._slots.release(pages)
        return len(pages) * self.page_size

    def unallocated(self, pages: Sequence[int]) -> list[int]:
        """Those of ``pages`` (page numbers) that are not allocated."""
        with self._alloc_lock:
            return self._slots.unheld(pages)

    def owners(self) -> dict[int, Any]:
        """Snapshot of page number → owner for every allocated page."""
        with self._alloc_lock:
            return self._slots.owners

    def clear(self) -> None:
        """Free every page (the contents are left as they are)."""
        with self._alloc_lock:
            self._slots.reset()


_INTEGER_DTYPES = frozenset(
    {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32, torch.uint64}
)
#: Below this many indices, index lists are built and checked in Python (fewer, cheaper tensor calls).
_SMALL = 256


def pages_to_tokens(pages: Sequence[int], page_size: int) -> torch.Tensor:
    """Token indices of whole pages, in order (built with numpy: cheaper than ``torch.tensor`` of a list)."""
    if len(pages) == 0:
        return torch.empty(0, dtype=torch.int64)
    base = np.asarray(pages, dtype=np.int64)
    if page_size > 1:
        base = (base[:, None] * page_size + np.arange(page_size, dtype=np.int64)).reshape(-1)
    return torch.from_numpy(base)


def tokens_to_pages(indices: Sequence[int] | torch.Tensor, page_size: int, size: int) -> list[int]:
    """Page numbers of page-aligned token indices; raises :class:`HostPoolError` if not whole pages in range."""
    count = indices.numel() if isinstance(indices, torch.Tensor) else len(indices)
    if count <= _SMALL:
        return _small_tokens_to_pages(indices, page_size, size)
    if isinstance(indices, torch.Tensor):
        flat = indices.reshape(-1).to("cpu", torch.int64)
    else:
        flat = torch.tensor([int(i) for i in indices], dtype=torch.int64)
    if flat.numel() % page_size:
        raise HostPoolError(f"{flat.numel()} token indices is not a whole number of pages of {page_size}")
    if flat.numel() == 0:
        return []
    starts = flat[::page_size]
    bad = bool(((starts % page_size != 0) | (starts < 0) | (starts >= size)).any())
    if not bad and page_size > 1:
        grid = flat.view(-1, page_size) - starts[:, None]
        bad = not torch.equal(grid, _offsets(page_size).expand_as(grid))
    if bad:
        raise HostPoolError("token indices must be whole, page-aligned pages inside the pool")
    return (starts // page_size).tolist()


def _small_tokens_to_pages(indices: Sequence[int] | torch.Tensor, page_size: int, size: int) -> list[int]:
    """:func:`tokens_to_pages` for a few indices, checked in Python."""
    if isinstance(indices, torch.Tensor):
        if indices.dtype not in _INTEGER_DTYPES:
            raise HostPoolError(f"token indices must be integers, got dtype {indices.dtype}")
        flat: list[int] = (indices if indices.dim() == 1 else indices.reshape(-1)).tolist()
    else:
        flat = [int(i) for i in indices]
    if len(flat) % page_size:
        raise HostPoolError(f"{len(flat)} token indices is not a whole number of pages of {page_size}")
    if not flat:
        return []
    if page_size == 1:
        if min(flat) < 0 or max(flat) >= size:
            raise HostPoolError("token indices must be whole, page-aligned pages inside the pool")
        return flat
    starts = flat[::page_size]
    for number, start in enumerate(starts):
        base = number * page_size
        if start % page_size or not 0 <= start < size or flat[base + page_size - 1] != start + page_size - 1:
            raise HostPoolError("token indices must be whole, page-aligned pages inside the pool")
        if flat[base : base + page_size] != list(range(start, start + page_size)):
            raise HostPoolError("token indices must be whole, page-aligned pages inside the pool")
    return [start // page_size for start in starts]


_OFFSETS: dict[int, torch.Tensor] = {}


def _offsets(page_size: int) -> torch.Tensor:
    offsets = _OFFSETS.get(page_size)
    if offsets is None:
        offsets = _OFFSETS[page_size] = torch.arange(page_size, dtype=torch.int64)
    return offsets
