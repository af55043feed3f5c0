"""The Mamba component: recurrent (Mamba/GDN) state, one slot per checkpoint.

Rules: the state after a prefix of ``end`` pages is all a restore needs besides KV, so restoring
needs the one state unit at position ``end - 1`` (hit policy ``TRAILING_PAGES`` with a window of
one) and a backup of a span writes only the state at its end. A prefix is restorable only where a
state was saved: at span ends. Units are state slots (``page_size`` 1) of a
:class:`~hicache_storage.pools.state_pool.HostStatePool` on the host and a :class:`DeviceStatePool` on the
device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from typing_extensions import Unpack

from ...errors import ConfigError
from ...page_allocator import PageAllocator
from ...pools import HostStatePool
from ...pools.state_pool import StateGeometry, state_geometry
from ..copy_engine import CopyHandle, byte_array, copy_runs, page_runs
from .base import Component

__all__ = ["DeviceStatePool", "MambaComponent", "StateCopyEngine"]


class DeviceStatePool(PageAllocator):
    """State slots on ``device``, laid out like :class:`HostStatePool` (temporal state, then conv states).

    Slots are allocated whole with an owner tag (``alloc(count, owner)``; ``page_size`` is 1).
    """

    page_size = 1
    unit_name: ClassVar[str] = "state slots"

    def __init__(
        self, *, num_slots: int, device: str | torch.device = "cpu", **geometry: Unpack[StateGeometry]
    ) -> None:
        # A one-slot host pool validates the geometry and computes the sizes once.
        probe = HostStatePool(num_slots=1, **geometry)
        layer_num = probe.num_mamba_layers
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ConfigError("num_slots", f"must be a positive int, got {num_slots!r}")
        self.device = torch.device(device)
        self.page_num = self.size = num_slots
        self.layer_num = layer_num
        self.temporal_shape = tuple(probe.temporal_state_shape)
        self.conv_shapes = [tuple(shape) for shape in probe.conv_state_shapes]
        self.temporal_dtype = probe.temporal_dtype
        self.conv_dtype = probe.conv_dtype
        self.bytes_per_page = self.size_per_token = probe.size_per_token
        self.temporal_buffer = torch.zeros(
            (num_slots, layer_num, *self.temporal_shape), dtype=self.temporal_dtype, device=self.device
        )
        self.conv_buffer = [
            torch.zeros((num_slots, layer_num, *shape), dtype=self.conv_dtype, device=self.device)
            for shape in self.conv_shapes
        ]
        #: ``(slots, elements)`` views of each state component, in slot byte order.
        self.segments = [t.view(num_slots, -1) for t in (self.temporal_buffer, *self.conv_buffer)]
        self._init_allocator()

    @classmethod
    def like(cls, host_pool: HostStatePool, num_slots: int, device: str | torch.device = "cpu") -> DeviceStatePool:
        """A device pool of ``num_slots`` slots with ``host_pool``'s geometry."""
        return cls(num_slots=num_slots, device=device, **state_geometry(host_pool))

    def host_pool(self, num_slots: int) -> HostStatePool:
        """A :class:`HostStatePool` of ``num_slots`` slots with this pool's geometry."""
        return HostStatePool(num_slots=num_slots, **state_geometry(self))

    def __repr__(self) -> str:
        return f"DeviceStatePool({self.device}, slots={self.page_num}, bytes/slot={self.bytes_per_page})"


class StateCopyEngine:
    """Copies whole state slots between a :class:`DeviceStatePool` and a :class:`HostStatePool`.

    Runs of slots consecutive on both sides move as one copy per state component. On CUDA the
    copies run on a side stream, as :class:`~hicache_storage.pipeline.CopyEngine`'s do.
    """

    def __init__(self, device_pool: DeviceStatePool, host_pool: HostStatePool) -> None:
        if device_pool.bytes_per_page != host_pool.size_per_token:
            raise ValueError(f"{device_pool!r} and {host_pool!r} do not share a state geometry")
        self.device_segments = device_pool.segments
        host = [host_pool.temporal_buffer, *host_pool.conv_buffer]
        self.host_segments = [t.view(host_pool.size, -1) for t in host]
        self.cuda = device_pool.device.type == "cuda"
        self._device = device_pool.device
        self._stream: Any = torch.cuda.Stream(device=self._device) if self.cuda else None  # type: ignore[no-untyped-call]
        self._device_bytes = _byte_arrays(self.device_segments)
        self._host_bytes = _byte_arrays(self.host_segments)

    def device_to_host(self, device_pages: Sequence[int], host_pages: Sequence[int]) -> CopyHandle:
        """Copy device slots into host slots (pairwise); complete once ``wait()`` returns."""
        if self._device_bytes is not None and self._host_bytes is not None:
            return _copy_bytes(self._host_bytes, host_pages, self._device_bytes, device_pages)
        return self._copy(self.host_segments, host_pages, self.device_segments, device_pages, to_device=False)

    def host_to_device(self, host_pages: Sequence[int], device_pages: Sequence[int]) -> CopyHandle:
        """Copy host slots into device slots (pairwise); keep the host slots until ``done()``."""
        if self._device_bytes is not None and self._host_bytes is not None:
            return _copy_bytes(self._device_bytes, device_pages, self._host_bytes, host_pages)
        return self._copy(self.device_segments, device_pages, self.host_segments, host_pages, to_device=True)

    def _copy(
        self,
        dst: list[torch.Tensor],
        dst_slots: Sequence[int],
        src: list[torch.Tensor],
        src_slots: Sequence[int],
        to_device: bool,
    ) -> CopyHandle:
        runs = page_runs(dst_slots, src_slots)
        if not self.cuda:
            for out, value in zip(dst, src, strict=True):
                for d, s, n in runs:
                    out.narrow(0, d, n).copy_(value.narrow(0, s, n))
            return CopyHandle()
        compute = torch.cuda.current_stream(self._device)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._stream.wait_stream(compute)
        with torch.cuda.stream(self._stream):
            for out, value in zip(dst, src, strict=True):
                for d, s, n in runs:
                    out.narrow(0, d, n).copy_(value.narrow(0, s, n), non_blocking=True)
            event.record(self._stream)
        if to_device:
            compute.wait_event(event)
        return CopyHandle(event)


def _byte_arrays(segments: list[torch.Tensor]) -> list[np.ndarray] | None:
    """Numpy views of the bytes of CPU state segments, or ``None`` (then tensor copies are used)."""
    arrays = [byte_array(segment) for segment in segments]
    return None if any(a is None for a in arrays) else [a for a in arrays if a is not None]


def _copy_bytes(
    dst: list[np.ndarray], dst_slots: Sequence[int], src: list[np.ndarray], src_slots: Sequence[int]
) -> CopyHandle:
    runs = page_runs(dst_slots, src_slots)
    for out, value in zip(dst, src, strict=True):
        copy_runs(out, value, runs, axis=0)
    return CopyHandle()


class MambaComponent(Component):
    """Recurrent state in ``device`` (a :class:`DeviceStatePool`): the state at a prefix's end."""

    kind: ClassVar[str] = "mamba"

    def __init__(self, device: DeviceStatePool, name: str = "mamba") -> None:
        if not isinstance(device, DeviceStatePool):
            raise ConfigError(f"component {name!r}", f"expected a DeviceStatePool, got {type(device).__name__}")
        super().__init__(name, device, window=1)
        self.state_pool = device

    def make_host_pool(self, units: int) -> HostStatePool:
        return self.state_pool.host_pool(units)

    def copier(self, host_pool: Any) -> StateCopyEngine:
        return StateCopyEngine(self.state_pool, host_pool)
