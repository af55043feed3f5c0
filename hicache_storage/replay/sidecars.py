"""Sidecar pools of a hybrid model in the replay: components, unit contents, checkpoints.

The replay builds the pipeline's own components (:mod:`hicache_storage.pipeline.components`) for
a model's sidecars, so every tier uses the same position rules (which units a span backs up,
which a prefix needs). Each unit's expected bytes derive from its component name and the KV page
hash at its position, so every unit loaded from host memory or storage is checked byte for byte.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..pipeline import Component, DeviceKVPool, DeviceStatePool, MambaComponent, SWAComponent
from .kvdata import fill_pages, matching_prefix, pool_bytes
from .models import ReplayGeometry
from .pages import page_contents

__all__ = ["Checkpoints", "UnitView", "build_components", "restorable_end", "span_ends", "unit_labels"]


def build_components(geometry: ReplayGeometry) -> list[Component]:
    """One pipeline component per sidecar of ``geometry``, with device pools of the real unit sizes."""
    components: list[Component] = []
    for side in geometry.sidecars:
        spec = side.spec
        if spec.kind == "swa":
            device = DeviceKVPool(
                num_pages=side.device_units,
                page_size=geometry.page_size,
                layer_num=1,
                head_num=1,
                head_dim=side.real_unit_bytes // geometry.page_size // 2,
                dtype="uint8",
            )
            components.append(SWAComponent(device, window_pages=side.window, name=spec.name))
        else:
            share = spec.conv_bytes / (spec.temporal_bytes + spec.conv_bytes)
            conv = max(1, round(side.real_unit_bytes * share)) if spec.conv_bytes else 0
            temporal = max(1, side.real_unit_bytes - conv)
            state = DeviceStatePool(
                num_slots=side.device_units,
                layer_num=1,
                temporal_shape=(temporal,),
                conv_shapes=((conv,),) if conv else (),
                temporal_dtype="uint8",
                conv_dtype="uint8",
            )
            components.append(MambaComponent(state, name=spec.name))
    return components


def unit_labels(name: str, hashes: Sequence[str]) -> list[str]:
    """Hex labels whose digests are the expected bytes of ``name``'s units at pages ``hashes``."""
    return [hashlib.sha256(f"{name}:{page_hash}".encode()).hexdigest() for page_hash in hashes]


class UnitView:
    """Byte views of one pool's units (a KV-shaped pool's pages, or a state pool's slots), no copy."""

    def __init__(self, pool: Any) -> None:
        self.kv_shaped = hasattr(pool, "segments_per_page")
        self.kv: npt.NDArray[np.uint8] | None = pool_bytes(pool) if self.kv_shaped else None
        self.parts: list[npt.NDArray[np.uint8]] = []
        if not self.kv_shaped:  # a state pool (CPU tensors here): temporal state, then conv states
            tensors = [pool.temporal_buffer, *pool.conv_buffer]
            self.parts = [t.reshape(t.shape[0], -1).view(torch.uint8).numpy() for t in tensors]
        self.widths = [part.shape[1] for part in self.parts]

    def fill(self, units: list[int], labels: list[str]) -> None:
        """Write the expected content of ``labels`` into ``units``."""
        if not units:
            return
        if self.kv is not None:
            fill_pages(self.kv, units, labels)
            return
        content = page_contents(labels, sum(self.widths))
        offset = 0
        for part, width in zip(self.parts, self.widths, strict=True):
            part[units, :] = content[:, offset : offset + width]
            offset += width

    def matching(self, units: list[int], labels: list[str]) -> int:
        """How many leading ``units`` hold exactly the content of ``labels``."""
        if not units:
            return 0
        if self.kv is not None:
            return matching_prefix(self.kv, units, labels)
        content = page_contents(labels, sum(self.widths))
        same = np.ones(len(units), dtype=bool)
        offset = 0
        for part, width in zip(self.parts, self.widths, strict=True):
            same &= (part[units, :] == content[:, offset : offset + width]).all(axis=1)
            offset += width
        bad = np.flatnonzero(~same)
        return len(units) if bad.size == 0 else int(bad[0])


def span_ends(begin: int, end: int, every: int) -> list[int]:
    """Ends of the spans ``[begin, end)`` is backed up as: each multiple of ``every`` inside it, and ``end``."""
    if begin >= end:
        return []
    if every <= 0:
        return [end]
    first = (begin // every + 1) * every
    return [*range(first, end, every), end]


def restorable_end(components: Sequence[Component], has: Any, start: int, end: int) -> int:
    """Largest prefix in ``(start, end]`` whose units every component has (``has(name, position)``), else ``start``."""
    for length in range(end, start, -1):
        if all(has(c.name, p) for c in components for p in c.restore_positions(start, length)):
            return length
    return start


class Checkpoints:
    """Prefix ends at which the device holds every sidecar's state (an LRU of ``capacity`` entries).

    Keyed by the KV page hash before the boundary; a checkpoint is usable only while the device
    still caches the KV pages before it (the caller matches KV first).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, capacity)
        self._keys: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, hashes: Sequence[str], end: int) -> None:
        """Keep the state after ``hashes[:end]`` (the least recently used state beyond capacity goes)."""
        if end < 1 or not self.capacity:
            return
        key = hashes[end - 1]
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def best(self, hashes: Sequence[str], limit: int) -> int:
        """Largest prefix ``<= limit`` with a kept state (0 if none); refreshes it."""
        for end in range(limit, 0, -1):
            if hashes[end - 1] in self._keys:
                self._keys.move_to_end(hashes[end - 1])
                return end
        return 0
