"""Host KV pool with SGLang's layouts, a page-granular slot allocator and zero-copy page views.

The pool is what ``register_mem_pool_host`` receives. It exposes the attributes and methods SGLang's
``HostKVCache`` offers to storage backends (``layout``, ``page_size``, ``dtype``, ``size``,
``kv_buffer``, ``size_per_token``, ``get_page_buffer_meta``, ``get_data_page``,
``get_dummy_flat_data_page``, ``set_from_flat_data_page``) plus :meth:`HostKVPool.page_segments`,
the list of writable memoryviews that make up one page (what backend primitives receive).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .errors import ConfigError, HostPoolError
from .page_allocator import PageAllocator

__all__ = ["LAYOUTS", "HostKVPool", "dtype_name", "parse_dtype"]

LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
}


def parse_dtype(value: str | torch.dtype) -> torch.dtype:
    """``torch.dtype`` for a name such as ``"bfloat16"`` (or a dtype, returned unchanged)."""
    if isinstance(value, torch.dtype):
        return value
    name = value.removeprefix("torch.")
    if name not in _DTYPES:
        raise ConfigError("dtype", f"unknown dtype {value!r}; expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    """Short name of a dtype, e.g. ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


class HostKVPool(PageAllocator):
    """A host (CPU) KV pool of ``num_pages`` pages of ``page_size`` tokens.

    MHA buffer shapes: ``layer_first (2, L, size, H, D)``, ``page_first (2, size, L, H, D)``,
    ``page_first_direct (2, pages, L, P, H, D)``, ``page_head (2, pages, H, P, L, D)`` (SGLang's:
    each head's bytes of a page are contiguous, so a run of heads is one slice of K and one of V).
    MLA (``kv_cache_dim`` = C): ``layer_first (L, size, 1, C)``, ``page_first (size, L, 1, C)``,
    ``page_first_direct (pages, L, P, 1, C)`` (no ``page_head``: MLA has no heads to split). Token
    index ``t`` of a page start is a multiple of ``page_size``. A page's byte image is the
    concatenation of :meth:`page_segments`, which is also
    the byte order of :meth:`get_data_page` with ``flat=True``.
    """

    def __init__(
        self,
        *,
        num_pages: int,
        page_size: int,
        layer_num: int,
        dtype: str | torch.dtype = "bfloat16",
        layout: str = "page_first",
        is_mla: bool = False,
        head_num: int = 1,
        head_dim: int = 1,
        kv_cache_dim: int = 1,
        pin_memory: bool | None = None,
    ) -> None:
        for name, value in (("num_pages", num_pages), ("page_size", page_size), ("layer_num", layer_num)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive int, got {value!r}")
        for name, value in (("head_num", head_num), ("head_dim", head_dim), ("kv_cache_dim", kv_cache_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive int, got {value!r}")
        if layout not in LAYOUTS:
            raise ConfigError("layout", f"unknown layout {layout!r}; expected one of {list(LAYOUTS)}")
        if is_mla and layout == "page_head":
            raise ConfigError("layout", "page_head splits KV heads; an MLA pool has none (use page_first)")
        self.layout = layout
        self.page_size = page_size
        self.page_num = num_pages
        self.size = num_pages * page_size
        self.layer_num = layer_num
        self.dtype = parse_dtype(dtype)
        self.is_mla = is_mla
        self.head_num = 1 if is_mla else head_num
        self.head_dim = kv_cache_dim if is_mla else head_dim
        self.kv_cache_dim = kv_cache_dim
        self.itemsize = torch.empty((), dtype=self.dtype).element_size()
        if is_mla:
            self.size_per_token = kv_cache_dim * layer_num * self.itemsize
        else:
            self.size_per_token = 2 * head_num * head_dim * layer_num * self.itemsize
        self.bytes_per_page = self.size_per_token * page_size
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        self.pin_memory = pin_memory
        self.kv_buffer = torch.zeros(self._shape(), dtype=self.dtype, pin_memory=pin_memory)
        # One flat uint8 numpy view of the whole buffer: slicing it yields zero-copy memoryviews.
        self._bytes = self.kv_buffer.view(-1).view(torch.uint8).numpy()
        self._segment_plan = self._plan_segments()
        self._page_views: list[list[memoryview] | None] = [None] * num_pages
        self._init_allocator()

    # ----------------------------------------------------------------- geometry
    def _shape(self) -> tuple[int, ...]:
        L, P, pages = self.layer_num, self.page_size, self.page_num
        if self.is_mla:
            C = self.kv_cache_dim
            return {
                "layer_first": (L, self.size, 1, C),
                "page_first": (self.size, L, 1, C),
                "page_first_direct": (pages, L, P, 1, C),
            }[self.layout]
        H, D = self.head_num, self.head_dim
        return {
            "layer_first": (2, L, self.size, H, D),
            "page_first": (2, self.size, L, H, D),
            "page_first_direct": (2, pages, L, P, H, D),
            "page_head": (2, pages, H, P, L, D),
        }[self.layout]

    def _plan_segments(self) -> list[tuple[int, int, int]]:
        """(base byte offset, byte stride per page, byte length) of each segment of page 0 + k."""
        L, P, size = self.layer_num, self.page_size, self.size
        item = self.itemsize
        token = (self.kv_cache_dim if self.is_mla else self.head_num * self.head_dim) * item
        if self.is_mla:
            if self.layout == "layer_first":
                return [(l * size * token, P * token, P * token) for l in range(L)]
            return [(0, P * L * token, P * L * token)]
        if self.layout == "layer_first":
            return [((kv * L + l) * size * token, P * token, P * token) for kv in range(2) for l in range(L)]
        half = size * L * token
        return [(kv * half, P * L * token, P * L * token) for kv in range(2)]

    @property
    def segments_per_page(self) -> int:
        """Number of separate memory regions one page occupies (2 for MHA ``page_first``, ...)."""
        return len(self._segment_plan)

    def page_segments(self, token_index: int) -> list[memoryview]:
        """Writable memoryviews (uint8) over the page starting at ``token_index``; no copy."""
        page = self._page_number(token_index)
        views = self._page_views[page]
        if views is None:
            data = self._bytes
            views = [
                data[base + page * stride : base + page * stride + length].data
                for base, stride, length in self._segment_plan
            ]
            self._page_views[page] = views
        return list(views)

    def page_starts(self, host_indices: Sequence[int] | torch.Tensor, count: int | None = None) -> list[int]:
        """Token index of each page start in ``host_indices`` (one entry per ``page_size`` tokens)."""
        if isinstance(host_indices, torch.Tensor):
            starts = host_indices[:: self.page_size].tolist()
        else:
            starts = [int(i) for i in list(host_indices)[:: self.page_size]]
        return starts if count is None else starts[:count]

    # ------------------------------------------------------------ SGLang surface
    def get_page_buffer_meta(self, indices: Sequence[int] | torch.Tensor) -> tuple[list[int], list[int]]:
        """Pointer and size lists of every segment of the pages in ``indices`` (token indices)."""
        base_ptr = self.kv_buffer.data_ptr()
        ptrs: list[int] = []
        sizes: list[int] = []
        for start in self.page_starts(indices):
            page = self._page_number(start)
            for base, stride, length in self._segment_plan:
                ptrs.append(base_ptr + base + page * stride)
                sizes.append(length)
        return ptrs, sizes

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """A copy of the page at token ``index``; flat (1-D) in page byte order when ``flat``."""
        page = torch.empty(self.bytes_per_page // self.itemsize, dtype=self.dtype)
        out = page.view(torch.uint8).numpy()
        offset = 0
        for segment in self.page_segments(index):
            out[offset : offset + len(segment)] = segment
            offset += len(segment)
        if flat:
            return page
        return page.reshape(self._page_shape())

    def _page_shape(self) -> tuple[int, ...]:
        L, P = self.layer_num, self.page_size
        if self.is_mla:
            return (L, P, 1, self.kv_cache_dim) if self.layout == "layer_first" else (1, L, P, 1, self.kv_cache_dim)
        if self.layout == "page_head":
            return (2, 1, self.head_num, P, L, self.head_dim)
        return (2, L, P, self.head_num, self.head_dim)

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """An uninitialised flat page tensor of the right dtype and size (for v0 reads)."""
        return torch.zeros(self.bytes_per_page // self.itemsize, dtype=self.dtype)

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Write a flat page (as produced by :meth:`get_data_page`) into the page at ``index``."""
        raw = data_page.contiguous().view(-1).view(torch.uint8).numpy()
        if raw.nbytes != self.bytes_per_page:
            raise HostPoolError(f"flat page has {raw.nbytes} bytes; this pool's pages have {self.bytes_per_page}")
        offset = 0
        for segment in self.page_segments(index):
            segment[:] = raw[offset : offset + len(segment)].data
            offset += len(segment)

    # ----------------------------------------------------------------- allocator
    def _page_numbers(self, indices: Sequence[int] | torch.Tensor) -> list[int]:
        """Page numbers of the page starts in ``indices`` (every ``page_size``-th token index)."""
        return [self._page_number(start) for start in self.page_starts(indices)]

    def __repr__(self) -> str:
        kind = "MLA" if self.is_mla else "MHA"
        return (
            f"HostKVPool({kind}, layout={self.layout}, dtype={dtype_name(self.dtype)}, "
            f"pages={self.page_num}x{self.page_size} tokens, page_bytes={self.bytes_per_page})"
        )
