"""A device KV pool with the host pool's geometry and a page-granular allocator with owner tags."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

import numpy as np
import torch
from typing_extensions import TypedDict, Unpack

from ..errors import ConfigError, HostPoolError
from ..host_pool import HostKVPool, take_pages

__all__ = [
    "DeviceKVPool",
    "KVGeometry",
    "PageAllocator",
    "kv_geometry",
    "page_view",
    "pages_to_tokens",
    "tokens_to_pages",
]


def page_view(buffer: torch.Tensor, num_pages: int, segments: int) -> torch.Tensor:
    """View of a pool buffer as ``(segments, pages, elements per page segment)`` (no copy).

    Every SGLang layout keeps the token (or page) dimension after the dimensions that split a page
    into segments, so one reshape gives a uniform page-indexed view of any layout.
    """
    return buffer.view(segments, num_pages, -1)


class KVGeometry(TypedDict, total=False):
    """A KV pool's geometry as :class:`HostKVPool` takes it (its defaults apply to what is left out)."""

    page_size: int
    layer_num: int
    dtype: str | torch.dtype
    layout: str
    is_mla: bool
    head_num: int
    head_dim: int
    kv_cache_dim: int


def kv_geometry(pool: HostKVPool | DeviceKVPool) -> KVGeometry:
    """The geometry of a host or device KV pool, to build another pool like it."""
    return cast(KVGeometry, {name: getattr(pool, name) for name in KVGeometry.__annotations__})


class PageAllocator:
    """Whole pages of a device pool handed out with an owner tag, taken back only if allocated.

    Pages come out in ascending order when the free list allows it. Token indices are page
    aligned (``page_size`` slots per page; a state pool has pages of one slot).
    """

    page_size: int
    page_num: int
    size: int
    #: What a page is called in error messages.
    unit_name: ClassVar[str] = "device pages"

    def _init_allocator(self) -> None:
        self._free: list[int] = list(range(self.page_num - 1, -1, -1))
        self._owners: dict[int, object] = {}

    @property
    def free_pages(self) -> int:
        """Pages not allocated."""
        return len(self._free)

    @property
    def used_pages(self) -> int:
        """Pages allocated."""
        return self.page_num - len(self._free)

    def alloc(self, num_tokens: int, owner: object = None) -> torch.Tensor | None:
        """Token indices of ``num_tokens // page_size`` whole pages, or ``None`` when too few are free."""
        if num_tokens < 0 or num_tokens % self.page_size:
            raise HostPoolError(f"alloc({num_tokens}): expected a non-negative multiple of page_size={self.page_size}")
        pages = self.alloc_pages(num_tokens // self.page_size, owner)
        return None if pages is None else pages_to_tokens(pages, self.page_size)

    def alloc_pages(self, count: int, owner: object = None) -> list[int] | None:
        """Page numbers of ``count`` whole pages (what :meth:`alloc` hands out), or ``None`` when too few are free."""
        pages = take_pages(self._free, count)
        if pages is not None:
            self._owners.update(dict.fromkeys(pages, owner))
        return pages

    def free(self, indices: Sequence[int] | torch.Tensor) -> int:
        """Return the pages of ``indices`` (token indices); raises :class:`HostPoolError` on a double free."""
        pages = tokens_to_pages(indices, self.page_size, self.size)
        if len(set(pages)) != len(pages):
            raise HostPoolError(f"free(): the same page appears twice in one call: {pages}")
        unowned = [page for page in pages if page not in self._owners]
        if unowned:
            raise HostPoolError(f"free(): {self.unit_name} {unowned} are not allocated (double free?)")
        for page in pages:
            del self._owners[page]
        self._free.extend(reversed(pages))  # popped back in ascending order: copies merge into runs
        return len(pages) * self.page_size

    def unallocated(self, pages: Sequence[int]) -> list[int]:
        """Those of ``pages`` (page numbers) that are not allocated."""
        owners = self._owners
        return [page for page in pages if page not in owners]

    def owners(self) -> dict[int, Any]:
        """Snapshot of page number → owner for every allocated page."""
        return dict(self._owners)


class DeviceKVPool(PageAllocator):
    """KV pool on ``device`` (CPU tensors stand in for a GPU) laid out like a :class:`HostKVPool`.

    ``geometry``: :class:`HostKVPool`'s keywords (``page_size``, ``layer_num``, ``dtype``,
    ``layout``, ``is_mla``, ``head_num``, ``head_dim``, ``kv_cache_dim``, with its defaults).
    Token indices are page aligned; :meth:`alloc` hands out whole pages tagged with an owner and
    :meth:`free` refuses pages that are not allocated. ``kv_buffer`` has the host pool's shape for
    the same layout, so :func:`page_view` applies to both.
    """

    def __init__(self, *, num_pages: int, device: str | torch.device = "cpu", **geometry: Unpack[KVGeometry]) -> None:
        # A one-page host pool validates the geometry and computes the shapes once.
        probe = HostKVPool(num_pages=1, pin_memory=False, **geometry)
        if isinstance(num_pages, bool) or not isinstance(num_pages, int) or num_pages < 1:
            raise ConfigError("num_pages", f"must be a positive int, got {num_pages!r}")
        self.device = torch.device(device)
        self.layout = probe.layout
        self.is_mla = probe.is_mla
        self.page_size = probe.page_size
        self.page_num = num_pages
        self.size = num_pages * probe.page_size
        self.layer_num = probe.layer_num
        self.dtype = probe.dtype
        self.head_num = probe.head_num
        self.head_dim = probe.head_dim
        self.kv_cache_dim = probe.kv_cache_dim
        self.size_per_token = probe.size_per_token
        self.bytes_per_page = probe.bytes_per_page
        self.segments_per_page = probe.segments_per_page
        shape = list(probe.kv_buffer.shape)
        # The page/token dimension comes right after the segment dimensions.
        dim = _page_dim(self.layout, self.is_mla)
        shape[dim] = shape[dim] * num_pages
        self.kv_buffer = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.pages = page_view(self.kv_buffer, num_pages, self.segments_per_page)
        self._init_allocator()

    @classmethod
    def like(cls, host_pool: HostKVPool, num_pages: int, device: str | torch.device = "cpu") -> DeviceKVPool:
        """A device pool of ``num_pages`` pages with ``host_pool``'s geometry."""
        return cls(num_pages=num_pages, device=device, **kv_geometry(host_pool))

    def host_pool(self, num_pages: int, pin_memory: bool | None = None) -> HostKVPool:
        """A :class:`HostKVPool` of ``num_pages`` pages with this pool's geometry."""
        if pin_memory is None:
            pin_memory = self.device.type == "cuda"
        return HostKVPool(num_pages=num_pages, pin_memory=pin_memory, **kv_geometry(self))

    def __repr__(self) -> str:
        kind = "MLA" if self.is_mla else "MHA"
        return f"DeviceKVPool({kind}, {self.layout}, {self.device}, pages={self.page_num}x{self.page_size} tokens)"


def _page_dim(layout: str, is_mla: bool) -> int:
    if is_mla:
        return 1 if layout == "layer_first" else 0
    return 2 if layout == "layer_first" else 1


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
        if indices.is_floating_point() or indices.dtype == torch.bool:
            raise HostPoolError(f"token indices must be integers, got dtype {indices.dtype}")
        flat: list[int] = indices.reshape(-1).tolist()
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
