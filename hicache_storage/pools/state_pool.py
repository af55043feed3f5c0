"""A host pool of fixed-size state slots (Mamba/GDN conv and temporal state), one slot per page.

Recurrent state is kept per node boundary, not per token page: a slot holds one checkpoint of
every state component for all layers. The pool offers what storage backends read from a host
pool (``page_size`` 1, ``size``, ``dtype``, ``layout``, ``size_per_token``, ``get_page_buffer_meta``,
``get_data_page``, ``get_dummy_flat_data_page``, ``set_from_flat_data_page``) plus
:meth:`HostStatePool.page_segments`, and the host KV pool's allocator
(:class:`~hicache_storage.page_allocator.PageAllocator`, pages of one slot). A slot's byte image is
the temporal state, then each conv state, as in SGLang's Mamba host pool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch
from typing_extensions import Required, TypedDict

from ..errors import ConfigError, HostPoolError
from ..host_pool import parse_dtype
from ..page_allocator import PageAllocator

__all__ = ["HostStatePool", "StateGeometry", "state_geometry"]


class StateGeometry(TypedDict, total=False):
    """A state pool's geometry as :class:`HostStatePool` takes it (its defaults apply to what is left out)."""

    layer_num: Required[int]
    temporal_shape: Sequence[int]
    conv_shapes: Sequence[Sequence[int]]
    temporal_dtype: str | torch.dtype
    conv_dtype: str | torch.dtype


def state_geometry(pool: Any) -> StateGeometry:
    """The geometry of a host state pool or of a pool with the same-named attributes (a device pool)."""
    if isinstance(pool, HostStatePool):
        return StateGeometry(
            layer_num=pool.num_mamba_layers,
            temporal_shape=tuple(pool.temporal_state_shape),
            conv_shapes=[tuple(shape) for shape in pool.conv_state_shapes],
            temporal_dtype=pool.temporal_dtype,
            conv_dtype=pool.conv_dtype,
        )
    return cast(StateGeometry, {name: getattr(pool, name) for name in StateGeometry.__annotations__})


class HostStatePool(PageAllocator):
    """``num_slots`` state slots, each a temporal state and conv states (``conv_shapes``) for every layer."""

    layout = "page_first"
    page_size = 1
    unit_name: ClassVar[str] = "state slots"

    def __init__(
        self,
        *,
        num_slots: int,
        layer_num: int,
        temporal_shape: Sequence[int] = (4, 8),
        conv_shapes: Sequence[Sequence[int]] = ((3, 8),),
        temporal_dtype: str | torch.dtype = "float32",
        conv_dtype: str | torch.dtype = "bfloat16",
    ) -> None:
        for name, value in (("num_slots", num_slots), ("layer_num", layer_num)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"must be a positive int, got {value!r}")
        shapes = [tuple(temporal_shape), *(tuple(shape) for shape in conv_shapes)]
        if any(
            not shape or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in shape) for shape in shapes
        ):
            raise ConfigError("state shapes", f"every dimension must be a positive int, got {shapes}")
        self.size = num_slots
        self.page_num = num_slots
        self.num_mamba_layers = layer_num
        self.temporal_dtype = parse_dtype(temporal_dtype)
        self.conv_dtype = parse_dtype(conv_dtype)
        self.dtype = self.conv_dtype
        self.temporal_state_shape = torch.Size(shapes[0])
        self.conv_state_shapes = [torch.Size(shape) for shape in shapes[1:]]
        self.temporal_buffer = torch.zeros((num_slots, layer_num, *shapes[0]), dtype=self.temporal_dtype)
        self.conv_buffer = [torch.zeros((num_slots, layer_num, *shape), dtype=self.conv_dtype) for shape in shapes[1:]]
        self._components = [self.temporal_buffer, *self.conv_buffer]
        self._bytes = [tensor.view(num_slots, -1).view(torch.uint8).numpy() for tensor in self._components]
        self.component_bytes = [int(math.prod(t.shape[1:])) * t.element_size() for t in self._components]
        self.size_per_token = sum(self.component_bytes)
        self.bytes_per_page = self.size_per_token
        self._init_allocator()

    def _page_number(self, index: int) -> int:
        slot = int(index)
        if not 0 <= slot < self.size:
            raise HostPoolError(f"state slot {slot} is outside the pool (size {self.size})")
        return slot

    def page_segments(self, index: int) -> list[memoryview]:
        """Writable views of slot ``index``: the temporal state, then each conv state."""
        slot = self._page_number(index)
        return [memoryview(array[slot]) for array in self._bytes]

    def get_page_buffer_meta(self, indices: Sequence[int] | torch.Tensor) -> tuple[list[int], list[int]]:
        """(pointers, sizes) of each slot's components, slot by slot."""
        ptrs: list[int] = []
        sizes: list[int] = []
        for index in torch.as_tensor(indices).reshape(-1).tolist():
            slot = self._page_number(index)
            for tensor, nbytes in zip(self._components, self.component_bytes, strict=True):
                ptrs.append(int(tensor.data_ptr()) + slot * nbytes)
                sizes.append(nbytes)
        return ptrs, sizes

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        """A copy of slot ``index``'s bytes (uint8), components in order."""
        slot = self._page_number(index)
        return torch.cat([torch.from_numpy(array[slot].copy()) for array in self._bytes])

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        """A zeroed flat slot image."""
        return torch.zeros(self.size_per_token, dtype=torch.uint8)

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        """Fill slot ``index`` from a flat image of :attr:`size_per_token` bytes."""
        slot = self._page_number(index)
        flat = data_page.contiguous().view(torch.uint8).reshape(-1).numpy()
        if flat.size != self.size_per_token:
            raise HostPoolError(f"state slot image has {flat.size} bytes, expected {self.size_per_token}")
        offset = 0
        for array, nbytes in zip(self._bytes, self.component_bytes, strict=True):
            array[slot][:] = flat[offset : offset + nbytes]
            offset += nbytes

    def fill_random(self, seed: int) -> None:
        """Seeded random bytes in every slot (for tests)."""
        generator = torch.Generator().manual_seed(seed)
        for array in self._bytes:
            array[:] = torch.randint(0, 256, array.shape, dtype=torch.uint8, generator=generator).numpy()

    def _page_numbers(self, indices: Sequence[int] | torch.Tensor) -> list[int]:
        return [self._page_number(i) for i in torch.as_tensor(indices).reshape(-1).tolist()]

    def __repr__(self) -> str:
        return f"<HostStatePool slots={self.size} layers={self.num_mamba_layers} bytes/slot={self.size_per_token}>"

    def describe(self) -> dict[str, Any]:
        """Geometry as plain values (for reports)."""
        return {
            "slots": self.size,
            "layers": self.num_mamba_layers,
            "temporal_shape": list(self.temporal_state_shape),
            "conv_shapes": [list(s) for s in self.conv_state_shapes],
            "bytes_per_slot": self.size_per_token,
        }
