"""Page copies between a device pool and a host pool.

Both pools are viewed as ``(segments, pages, elements)`` (see :func:`page_view`). Page lists are
split into runs that are consecutive on both sides, and each run is one strided copy, so copying
pages laid out back to back costs one copy. On CUDA, copies run on a side stream into/out of pinned
host memory: device→host waits for the compute stream and is complete when :meth:`CopyHandle.wait`
returns; host→device makes the compute stream wait for it, and its host pages may be reused once
:meth:`CopyHandle.done` is true. On CPU every copy is complete on return; it runs on numpy views
of the pools' bytes (a slice assignment per run costs less than a tensor view and a copy call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..host_pool import HostKVPool
from .device_pool import DeviceKVPool, page_view

__all__ = ["CopyEngine", "CopyHandle", "byte_array", "copy_runs", "page_runs"]


def page_runs(dst: Sequence[int], src: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(dst start, src start, length)`` runs covering the pairs ``dst[i] <- src[i]`` in order."""
    count = len(dst)
    if count == 1 == len(src):
        return [(dst[0], src[0], 1)]
    if count and count == len(src) and _consecutive(dst) and _consecutive(src):
        return [(dst[0], src[0], count)]
    runs: list[tuple[int, int, int]] = []
    for d, s in zip(dst, src, strict=True):
        if runs:
            d0, s0, n = runs[-1]
            if d == d0 + n and s == s0 + n:
                runs[-1] = (d0, s0, n + 1)
                continue
        runs.append((d, s, 1))
    return runs


def _consecutive(pages: Sequence[int]) -> bool:
    """Whether ``pages`` count up by one from the first."""
    first = pages[0]
    listed = pages if type(pages) is list else list(pages)
    return pages[-1] - first == len(pages) - 1 and listed == list(range(first, first + len(pages)))


def byte_array(tensor: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a CPU tensor's bytes (the last dimension in bytes), or ``None`` if it has none."""
    if tensor.device.type != "cpu":
        return None
    try:
        return tensor.view(torch.uint8).numpy()
    except (RuntimeError, TypeError):  # a last dimension that is not contiguous
        return None


def copy_runs(dst: np.ndarray, src: np.ndarray, runs: Sequence[tuple[int, int, int]], axis: int) -> None:
    """Copy each run ``(dst start, src start, length)`` along ``axis`` (0 or 1) from ``src`` into ``dst``."""
    if axis == 0:
        for d, s, n in runs:
            dst[d : d + n] = src[s : s + n]
    else:
        for d, s, n in runs:
            dst[:, d : d + n] = src[:, s : s + n]


class CopyHandle:
    """A launched copy: ``done()`` polls, ``wait()`` blocks until it has landed."""

    __slots__ = ("event",)

    def __init__(self, event: Any = None) -> None:
        self.event = event

    def done(self) -> bool:
        """Whether the copy has completed (always true on CPU)."""
        return self.event is None or bool(self.event.query())

    def wait(self) -> None:
        """Block the calling thread until the copy has completed."""
        if self.event is not None:
            self.event.synchronize()


class CopyEngine:
    """Copies whole pages between ``device_pool`` and ``host_pool`` (same geometry required)."""

    def __init__(self, device_pool: DeviceKVPool, host_pool: HostKVPool) -> None:
        if (
            device_pool.bytes_per_page != host_pool.bytes_per_page
            or device_pool.layout != host_pool.layout
            or device_pool.dtype != host_pool.dtype
            or device_pool.segments_per_page != host_pool.segments_per_page
        ):
            raise ValueError(f"{device_pool!r} and {host_pool!r} do not share a page geometry")
        self.device_pool = device_pool
        self.host_pool = host_pool
        self.device_pages = device_pool.pages
        self.host_pages = page_view(host_pool.kv_buffer, host_pool.page_num, host_pool.segments_per_page)
        self.cuda = device_pool.device.type == "cuda"
        self._stream: Any = None
        if self.cuda:
            self._stream = torch.cuda.Stream(device=device_pool.device)  # type: ignore[no-untyped-call]
        self._device_bytes = byte_array(self.device_pages)
        self._host_bytes = byte_array(self.host_pages)

    def device_to_host(self, device_pages: Sequence[int], host_pages: Sequence[int]) -> CopyHandle:
        """Copy device pages into host pages (pairwise). Call ``wait()`` before reading the host pages."""
        runs = page_runs(host_pages, device_pages)
        return self._copy(
            self.host_pages, self.device_pages, self._host_bytes, self._device_bytes, runs, to_device=False
        )

    def host_to_device(self, host_pages: Sequence[int], device_pages: Sequence[int]) -> CopyHandle:
        """Copy host pages into device pages (pairwise). Keep the host pages until ``done()``."""
        runs = page_runs(device_pages, host_pages)
        return self._copy(
            self.device_pages, self.host_pages, self._device_bytes, self._host_bytes, runs, to_device=True
        )

    def _copy(
        self,
        dst: torch.Tensor,
        src: torch.Tensor,
        dst_bytes: np.ndarray | None,
        src_bytes: np.ndarray | None,
        runs: list[tuple[int, int, int]],
        *,
        to_device: bool,
    ) -> CopyHandle:
        if self.cuda:
            return self._copy_cuda(dst, src, runs, to_device)
        if dst_bytes is not None and src_bytes is not None:
            copy_runs(dst_bytes, src_bytes, runs, axis=1)
        else:
            _copy_all([dst.narrow(1, d, n) for d, _, n in runs], [src.narrow(1, s, n) for _, s, n in runs])
        return CopyHandle()

    def _copy_cuda(
        self, dst: torch.Tensor, src: torch.Tensor, runs: list[tuple[int, int, int]], to_device: bool
    ) -> CopyHandle:
        # Per segment, each run is one contiguous block on both sides: a plain async memcpy.
        compute = torch.cuda.current_stream(self.device_pool.device)
        stream = self._stream
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        stream.wait_stream(compute)
        with torch.cuda.stream(stream):
            for segment in range(dst.shape[0]):
                for d, s, n in runs:
                    dst[segment].narrow(0, d, n).copy_(src[segment].narrow(0, s, n), non_blocking=True)
            event.record(stream)
        if to_device:
            compute.wait_event(event)
        return CopyHandle(event)


def _copy_all(outs: list[torch.Tensor], ins: list[torch.Tensor]) -> None:
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None and len(outs) > 1:
        foreach(outs, ins)
        return
    for out, value in zip(outs, ins, strict=True):
        out.copy_(value)
