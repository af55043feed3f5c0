"""Deployments of one model at several TP sizes over one store: seeded global KV and per-rank host pools.

:func:`global_kv` draws a model's KV for some pages, ``(pages, 2, layers, page_size, heads, head_dim)``;
:func:`fill_rank` puts a rank's heads of it into a host pool (ours or SGLang's, any MHA layout) and
:func:`rank_heads` reads them back, so a test compares, head by head, what a TP=T rank read with
what a TP=T' rank wrote. :func:`tp_group` opens one storage per rank with ``tp_lcm_size`` set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..config import make_config
from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..registry import load_backend

__all__ = ["expected_heads", "fill_rank", "global_kv", "rank_heads", "rank_pool", "tp_group"]


def global_kv(
    pages: int, *, layers: int = 2, page_size: int = 4, heads: int = 8, head_dim: int = 4, seed: int = 11
) -> torch.Tensor:
    """Seeded bfloat16 KV of ``pages`` pages for every head: ``(pages, 2, layers, page_size, heads, head_dim)``."""
    generator = torch.Generator().manual_seed(seed)
    shape = (pages, 2, layers, page_size, heads, head_dim * 2)
    raw = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    return raw.view(torch.bfloat16)


def _page_view(pool: Any, page: int) -> torch.Tensor:
    """Page ``page`` of an MHA pool's ``kv_buffer`` as a ``(2, layers, page_size, heads, head_dim)`` view."""
    buffer: torch.Tensor = pool.kv_buffer
    P = int(pool.page_size)
    layout = pool.layout
    if layout == "layer_first":
        return buffer[:, :, page * P : (page + 1) * P]
    if layout == "page_first":
        return buffer[:, page * P : (page + 1) * P].permute(0, 2, 1, 3, 4)
    if layout == "page_first_direct":
        return buffer[:, page]
    if layout == "page_head":
        return buffer[:, page].permute(0, 3, 2, 1, 4)
    raise ValueError(f"unknown MHA layout {layout!r}")


def _heads(kv: torch.Tensor, rank: int, tp_size: int) -> slice:
    per_rank = kv.shape[-2] // tp_size
    return slice(rank * per_rank, (rank + 1) * per_rank)


def fill_rank(pool: Any, kv: torch.Tensor, rank: int, tp_size: int, pages: range | None = None) -> None:
    """Write rank ``rank`` of ``tp_size``'s heads of ``kv`` into ``pool``'s pages ``pages`` (default 0..)."""
    for slot, page in enumerate(pages if pages is not None else range(kv.shape[0])):
        _page_view(pool, page).copy_(kv[slot][..., _heads(kv, rank, tp_size), :])


def rank_heads(pool: Any, page: int) -> torch.Tensor:
    """A copy of page ``page``'s heads in ``pool``: ``(2, layers, page_size, heads, head_dim)``."""
    return _page_view(pool, page).clone()


def expected_heads(kv: torch.Tensor, slot: int, rank: int, tp_size: int) -> torch.Tensor:
    """What rank ``rank`` of ``tp_size`` holds of page ``slot`` of ``kv``."""
    return kv[slot][..., _heads(kv, rank, tp_size), :]


def rank_pool(kv: torch.Tensor, tp_size: int, layout: str, num_pages: int = 16) -> HostKVPool:
    """An empty host pool shaped for one rank of a TP=``tp_size`` deployment of ``kv``'s model."""
    _, _, layers, page_size, heads, head_dim = kv.shape
    return HostKVPool(
        num_pages=num_pages,
        page_size=page_size,
        layer_num=layers,
        dtype=kv.dtype,
        layout=layout,
        head_num=heads // tp_size,
        head_dim=head_dim,
        pin_memory=False,
    )


def tp_group(
    backend: Any,
    extra_config: Mapping[str, Any],
    kv: torch.Tensor,
    tp_size: int,
    layout: str,
    *,
    tp_lcm_size: int | None = 4,
    model: str = "cross-tp",
    pool: Callable[[int], Any] | None = None,
) -> list[HiCacheStorage]:
    """One storage per rank of a TP=``tp_size`` deployment, each with an empty ``layout`` pool registered.

    ``tp_lcm_size`` goes into the config as SGLang's controller puts it (``None``: rank-local pages);
    ``pool(rank)`` builds a rank's host pool instead of :func:`rank_pool`.
    """
    group = []
    for rank in range(tp_size):
        config = make_config(model, tp_rank=rank, tp_size=tp_size, extra_config=dict(extra_config))
        config.tp_lcm_size = tp_lcm_size
        storage = load_backend(backend, config)
        storage.register_mem_pool_host(pool(rank) if pool is not None else rank_pool(kv, tp_size, layout))
        group.append(storage)
    return group
