"""What the SDK reads from a host pool (ours or SGLang's): the :class:`HostPool` protocol and its facts.

Host pools come from several places (:class:`~hicache_storage.host_pool.HostKVPool`, the state
pool, SGLang's ``HostKVCache`` subclasses and its hybrid pool group), and not every one has every
attribute. :func:`pool_facts` reads them once, when a pool is registered; everything else works on
the resulting :class:`PoolFacts`, never on the pool's attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..keys import describe_value
from .names import pool_name_str

__all__ = ["GEOMETRY_ATTRIBUTES", "HostPool", "HostPoolGroup", "PoolFacts", "group_parts", "pool_facts"]

#: Pool attributes that describe a sidecar's geometry (whichever the pool has); they enter its key space.
GEOMETRY_ATTRIBUTES = (
    "layer_num",
    "head_num",
    "head_dim",
    "kv_cache_dim",
    "num_mamba_layers",
    "conv_dtype",
    "temporal_dtype",
    "conv_state_shapes",
    "temporal_state_shape",
    "state_shapes",
    "window_pages",
)


class HostPool(Protocol):
    """The surface every host pool offers (SGLang's ``HostKVCache`` and this SDK's pools).

    Optional members, read by :func:`pool_facts` where present: ``bytes_per_page``,
    ``page_segments(index)`` (zero-copy segment views), ``is_mla``, ``layer_num``, ``kv_buffer``
    (``None`` for a pool that holds no bytes) and the attributes of :data:`GEOMETRY_ATTRIBUTES`.
    """

    page_size: int
    size: int
    dtype: Any
    layout: str
    size_per_token: int

    def get_page_buffer_meta(self, indices: Any) -> tuple[list[int], list[int]]: ...

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor: ...

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None: ...

    def get_dummy_flat_data_page(self) -> torch.Tensor: ...


class HostPoolGroup(Protocol):
    """SGLang's hybrid pool group: an anchor entry (the KV pool) and every entry, each ``name`` + ``host_pool``."""

    anchor_entry: Any
    entries: Sequence[Any]


@dataclass(frozen=True)
class PoolFacts:
    """A host pool's facts, read once.

    - ``page_size``: slots per page; ``size``: slots in the pool.
    - ``dtype`` / ``layout``: as text (``"bfloat16"``, ``"page_first"``).
    - ``page_bytes``: bytes of one page (0 for a pool whose size is unknown and that holds no bytes).
    - ``is_mla``: the pool stores MLA latents (one segment per layer, no K/V split).
    - ``holds_no_bytes``: a logical anchor (its ``kv_buffer`` is ``None``; e.g. DeepSeek-V4's).
    - ``layer_num``: layers per page where the pool says (orders a foreign ``layer_first`` page's segments).
    - ``geometry``: the sidecar geometry pairs of :data:`GEOMETRY_ATTRIBUTES` the pool has.
    - ``segments``: the pool's zero-copy ``page_segments`` where it has one.
    """

    page_size: int
    size: int
    dtype: str
    layout: str
    page_bytes: int
    is_mla: bool
    holds_no_bytes: bool
    layer_num: int | None
    geometry: tuple[tuple[str, str], ...]
    segments: Callable[[int], list[memoryview]] | None


def _page_bytes(pool: Any) -> int:
    value = getattr(pool, "bytes_per_page", None)
    if isinstance(value, int):
        return value
    return int(pool.size_per_token) * int(pool.page_size)


def pool_facts(pool: HostPool | Any) -> PoolFacts:
    """The :class:`PoolFacts` of ``pool`` (every optional attribute is read here and only here)."""
    holds_no_bytes = hasattr(pool, "kv_buffer") and pool.kv_buffer is None
    try:
        page_bytes = _page_bytes(pool)
    except (AttributeError, TypeError, ValueError):
        if not holds_no_bytes:
            raise
        page_bytes = 0
    is_mla = getattr(pool, "is_mla", None)
    layers = getattr(pool, "layer_num", None)
    segments = getattr(pool, "page_segments", None)
    return PoolFacts(
        page_size=int(getattr(pool, "page_size", 1) or 1),
        size=int(getattr(pool, "size", 0) or 0),
        dtype=describe_value(getattr(pool, "dtype", "unknown")),
        layout=str(getattr(pool, "layout", "unknown")),
        page_bytes=page_bytes,
        is_mla=("MLA" in type(pool).__name__) if is_mla is None else bool(is_mla),
        holds_no_bytes=holds_no_bytes,
        layer_num=int(layers) if isinstance(layers, int) and not isinstance(layers, bool) else None,
        geometry=tuple(
            (name, describe_value(getattr(pool, name)))
            for name in GEOMETRY_ATTRIBUTES
            if getattr(pool, name, None) is not None
        ),
        segments=segments if callable(segments) else None,
    )


def group_parts(pool: Any) -> tuple[Any, list[tuple[str, Any]]] | None:
    """``(anchor pool, [(name, sidecar pool), ...])`` of a hybrid pool group; ``None`` for a plain pool."""
    anchor = getattr(pool, "anchor_entry", None)
    entries = getattr(pool, "entries", None)
    if anchor is None or entries is None:
        return None
    sidecars = [(pool_name_str(entry.name), entry.host_pool) for entry in entries if entry is not anchor]
    return anchor.host_pool, sidecars
