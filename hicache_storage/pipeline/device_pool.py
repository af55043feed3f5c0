"""A device KV pool with the host pool's geometry and a page-granular allocator with owner tags."""

from __future__ import annotations

from typing import ClassVar, cast

import torch
from typing_extensions import TypedDict, Unpack

from ..errors import ConfigError
from ..host_pool import HostKVPool
from ..page_allocator import PageAllocator, pages_to_tokens, tokens_to_pages

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


class DeviceKVPool(PageAllocator):
    """KV pool on ``device`` (CPU tensors stand in for a GPU) laid out like a :class:`HostKVPool`.

    ``geometry``: :class:`HostKVPool`'s keywords (``page_size``, ``layer_num``, ``dtype``,
    ``layout``, ``is_mla``, ``head_num``, ``head_dim``, ``kv_cache_dim``, with its defaults).
    Token indices are page aligned; :meth:`alloc` hands out whole pages tagged with an owner and
    :meth:`free` refuses pages that are not allocated. ``kv_buffer`` has the host pool's shape for
    the same layout, so :func:`page_view` applies to both.
    """

    unit_name: ClassVar[str] = "device pages"

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
