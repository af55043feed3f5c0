"""Page-indexed byte views of KV pools and the moves the engine model makes between them.

Pools live in CPU memory here (CPU tensors stand in for the device), so the views are numpy arrays
sharing the pools' memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..pipeline import page_view
from .pages import page_contents

__all__ = ["PageView", "copy_pages", "fill_pages", "matching_prefix", "pool_bytes"]

#: ``(segments, pages, bytes per segment)`` uint8 view of a pool.
PageView = npt.NDArray[np.uint8]


def pool_bytes(pool: Any) -> PageView:
    """A ``(segments, pages, bytes per segment)`` uint8 view of ``pool.kv_buffer`` (no copy)."""
    view = page_view(pool.kv_buffer, int(pool.page_num), int(pool.segments_per_page))
    array: PageView = view.view(torch.uint8).numpy()
    return array


def _expected(view: PageView, hashes: list[str]) -> PageView:
    segments, _pages, width = view.shape
    contents = page_contents(hashes, segments * width)
    return contents.reshape(len(hashes), segments, width).transpose(1, 0, 2)


def fill_pages(view: PageView, slots: list[int], hashes: list[str]) -> None:
    """Write the expected content of ``hashes`` into ``slots`` (what prefill would compute)."""
    if slots:
        view[:, slots, :] = _expected(view, hashes)


def matching_prefix(view: PageView, slots: list[int], hashes: list[str]) -> int:
    """How many leading pages in ``slots`` hold exactly the content of ``hashes``."""
    if not slots:
        return 0
    same = (view[:, slots, :] == _expected(view, hashes)).all(axis=(0, 2))
    bad = np.flatnonzero(~same)
    return len(slots) if bad.size == 0 else int(bad[0])


def copy_pages(dst: PageView, dst_slots: list[int], src: PageView, src_slots: list[int]) -> None:
    """Copy pages ``src_slots`` of ``src`` into ``dst_slots`` of ``dst``."""
    if dst_slots:
        dst[:, dst_slots, :] = src[:, src_slots, :]
