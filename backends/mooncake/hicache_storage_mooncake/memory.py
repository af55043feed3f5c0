"""Registered memory of the mooncake backend: slab arenas lent one slab per call, addresses of buffers.

The transfer engine moves bytes only from and to registered memory. The backend registers the host
pool's tensors (:func:`pool_tensors`), an arena of record headers and an arena of staging slabs
(:class:`SlabArena`); :func:`address` gives the pointer of a page segment to check against them.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from hicache_storage.plugin import BackendFault, current_deadline

__all__ = ["SLAB_WAIT_S", "SlabArena", "address", "pool_tensors"]

#: How long a call waits for a free header slab before failing (counted as a fault).
SLAB_WAIT_S = 30.0


def address(segment: memoryview) -> int:
    """Address of a segment's first byte (read-only views too)."""
    try:  # writable buffers (host-pool pages): several times cheaper than going through numpy
        return ctypes.addressof(ctypes.c_char.from_buffer(segment))
    except TypeError:
        return int(np.frombuffer(segment, np.uint8).__array_interface__["data"][0])


def pool_tensors(pool: Any) -> list[Any]:
    """The tensors holding a host pool's pages: ``kv_buffer`` (KV pools), Mamba's temporal and conv buffers."""
    found: list[Any] = []
    for name in ("kv_buffer", "temporal_buffer", "conv_buffer"):
        value = getattr(pool, name, None)
        if value is None:
            continue
        found.extend(value if isinstance(value, (list, tuple)) else [value])
    return [tensor for tensor in found if hasattr(tensor, "data_ptr")]


class SlabArena:
    """Registered memory lent out in slabs of ``per_slab`` items of ``item_bytes`` (one slab per call).

    Calls running at once each hold their own slab, so they never share bytes; a call finding
    no free slab within ``SLAB_WAIT_S`` fails with :class:`BackendFault`.
    """

    def __init__(self, slabs: int, per_slab: int, item_bytes: int, what: str) -> None:
        self.per_slab = per_slab
        self.item_bytes = item_bytes
        self.what = what
        self.slab_bytes = per_slab * item_bytes
        self.tensor = torch.zeros(slabs * self.slab_bytes, dtype=torch.uint8)
        self.base = int(self.tensor.data_ptr())
        self.size = slabs * self.slab_bytes
        self.array = self.tensor.numpy()
        self.view = self.array.data.cast("B")
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._kept: set[int] = set()
        self._kept_lock = threading.Lock()
        for slab in range(slabs):
            self._free.put(slab * self.slab_bytes)

    @contextmanager
    def slab(self) -> Iterator[int]:
        """Offset of a slab reserved for the caller until the block ends (or, if :meth:`keep` was
        called for it, until :meth:`give_back`)."""
        timeout = SLAB_WAIT_S
        deadline = current_deadline()
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline - time.monotonic()))
        try:
            offset = self._free.get(timeout=timeout)
        except queue.Empty:
            raise BackendFault(f"no free {self.what} slab within {timeout:.3f} s") from None
        try:
            yield offset
        finally:
            with self._kept_lock:
                kept = offset in self._kept
            if not kept:
                self._free.put(offset)

    def keep(self, offset: int) -> None:
        """Hold the slab at ``offset`` past its block: a call given up on may still write into it."""
        with self._kept_lock:
            self._kept.add(offset)

    def give_back(self, offset: int) -> None:
        """Return a slab held by :meth:`keep`."""
        with self._kept_lock:
            self._kept.discard(offset)
        self._free.put(offset)
