"""The host pools one storage instance serves: per pool its key space, facts and page buffers.

``register_mem_pool_host`` attaches the main KV pool (``"kv"``); ``register_mem_host_pool_v2``
attaches sidecar pools (Mamba state, SWA window KV, DSA indexer, ...). Each pool gets its own
:class:`~hicache_storage.keys.KeySpace` (see :func:`hicache_storage.keys.pool_keyspace`), so pages of
two pools, or of two deployments whose pools differ, never share a storage key.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ..errors import ConfigError, InvalidRequestError
from ..keys import KeySpace
from ..page_buffers import PageBuffers
from .buffers import pool_page_buffers
from .host import PoolFacts
from .names import pool_name_str
from .shards import HeadShards

__all__ = ["PoolRegistry", "RegisteredPool"]


@functools.lru_cache(maxsize=16)
def _page_offsets(page_size: int) -> npt.NDArray[np.int64]:
    """``0 .. page_size-1`` (cached: a process uses a handful of page sizes)."""
    return np.arange(page_size, dtype=np.int64)


@dataclass
class RegisteredPool:
    """One attached host pool: its name, key space and facts; ``shards`` when its pages split into head shards."""

    name: str
    pool: Any
    keyspace: KeySpace
    facts: PoolFacts
    _zero_copy: bool | None = None
    shards: HeadShards | None = None

    def record_keys(self, keys: Sequence[str]) -> list[str]:
        """Storage keys of the records holding validated ``keys``' pages (each page's shards, in order)."""
        if self.shards is None:
            return self.keyspace.storage_keys_unchecked(keys)
        return self.shards.storage_keys(self.keyspace, keys)

    def per_page(self, flags: list[bool]) -> list[bool]:
        """Per-record flags folded to one per page (a page counts only when all its shards do)."""
        return flags if self.shards is None else self.shards.fold(flags)

    def records(
        self, op: str, pages: list[PageBuffers]
    ) -> tuple[list[PageBuffers], Callable[[list[bool]], list[bool]] | None]:
        """Buffers of the records of ``pages`` for ``op`` (``"get"``/``"set"``), and what to run with the
        per-page read results (scatter staged shards; ``None`` when the records are the pages' memory)."""
        if self.shards is None:
            return pages, None
        if op == "get":
            return self.shards.for_read(pages)
        return self.shards.for_write(pages), None

    @property
    def page_size(self) -> int:
        """Slots per page."""
        return self.facts.page_size

    @property
    def holds_no_bytes(self) -> bool:
        """Whether the pool is a logical anchor with no bytes to move."""
        return self.facts.holds_no_bytes

    def same_geometry(self, other: RegisteredPool) -> bool:
        """Whether ``other`` would store the same bytes under the same keys."""
        return self.keyspace == other.keyspace and self.holds_no_bytes == other.holds_no_bytes

    def page_starts(self, count: int, host_indices: Any) -> list[int]:
        """First slot of each of ``count`` pages in ``host_indices``; raises :class:`InvalidRequestError`."""
        page_size = self.page_size
        what = f"pool {self.name!r}: host_indices"
        if host_indices is None:
            if count:
                raise InvalidRequestError(f"{what} is missing; expected {count} * {page_size} slot indices")
            return []
        flat = _index_tensor(host_indices, what)
        if flat.numel() != count * page_size:
            raise InvalidRequestError(
                f"{what} has {flat.numel()} entries; expected len(keys) * page_size = "
                f"{count} * {page_size} = {count * page_size}"
            )
        if not count:
            return []
        # NumPy on the tensor's memory: a batch's first calls run with cold CPU caches, where each
        # NumPy call costs about half of a torch call
        pages = flat.numpy().reshape(count, page_size)
        result: list[int] = pages[:, 0].tolist()
        if page_size > 1 and not (pages - _page_offsets(page_size) == pages[:, :1]).all():
            raise InvalidRequestError(f"{what}: each page's slot indices must be consecutive")
        size = self.facts.size
        if any(start % page_size or not 0 <= start < size for start in result):
            raise InvalidRequestError(
                f"{what}: every page must start at a multiple of page_size={page_size} inside the pool (size {size})"
            )
        return result

    def pages(self, starts: Sequence[int]) -> tuple[list[PageBuffers], Callable[[list[bool]], None] | None]:
        """Buffers of the pages at ``starts``, and what to run after a read (``None`` when they are the pool's memory).

        Zero-copy views where the pool offers them; otherwise flat page copies, which the returned
        callable copies back into the pool for the pages read successfully.
        """
        if self._zero_copy is not False:
            try:
                views = pool_page_buffers(self.pool, starts, self.facts)
            except (NotImplementedError, ValueError, AttributeError, TypeError):
                if self._zero_copy:
                    raise
                self._zero_copy = False
            else:
                self._zero_copy = True
                return views, None
        return self._copied_pages(starts)

    def _copied_pages(self, starts: Sequence[int]) -> tuple[list[PageBuffers], Callable[[list[bool]], None]]:
        pool = self.pool
        tensors = [pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).reshape(-1) for start in starts]
        pages: list[PageBuffers] = [[memoryview(tensor.numpy()).cast("B")] for tensor in tensors]

        def copy_back(results: list[bool]) -> None:
            for start, tensor, ok in zip(starts, tensors, results, strict=True):
                if ok:
                    pool.set_from_flat_data_page(start, tensor)

        return pages, copy_back


def _index_tensor(host_indices: Any, what: str) -> torch.Tensor:
    """``host_indices`` as a flat int64 CPU tensor; floats and booleans are refused, not truncated."""
    if isinstance(host_indices, torch.Tensor):
        tensor = host_indices
    else:
        try:
            tensor = torch.as_tensor(host_indices if hasattr(host_indices, "__array__") else list(host_indices))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InvalidRequestError(f"{what} must be integers: {exc}") from None
    if tensor.dtype is torch.int64 and tensor.is_cpu and tensor.dim() == 1 and tensor.is_contiguous():
        return tensor  # what SGLang passes: nothing to convert
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise InvalidRequestError(f"{what} must hold integer slot indices, got dtype {tensor.dtype}")
    return tensor.reshape(-1).to(torch.int64).cpu().contiguous()


class PoolRegistry:
    """The pools of one backend instance, by name; ``"kv"`` is the main KV pool."""

    def __init__(self) -> None:
        self._pools: dict[str, RegisteredPool] = {}
        self._lock = threading.Lock()
        #: Pools whose head shards are off for this deployment (their keys stay rank-local).
        self.shards_off: set[str] = set()

    def add(self, entry: RegisteredPool) -> bool:
        """Attach ``entry``; ``False`` when the same pool was already attached with the same geometry.

        Another geometry under a registered name raises :class:`ConfigError` naming the pool.
        """
        with self._lock:
            known = self._pools.get(entry.name)
            if known is not None:
                if not known.same_geometry(entry):
                    raise ConfigError(
                        f"pool {entry.name!r}",
                        "already registered with another geometry (dtype, layout, page size or bytes per page); "
                        "a backend instance serves one geometry per pool",
                    )
                known.pool = entry.pool
                return False
            self._pools[entry.name] = entry
            return True

    def get(self, name: object) -> RegisteredPool:
        """The pool registered as ``name``; raises :class:`InvalidRequestError` naming it and the known pools."""
        key = pool_name_str(name)
        entry = self._pools.get(key)
        if entry is None:
            known = ", ".join(repr(item) for item in sorted(self._pools)) or "none"
            raise InvalidRequestError(
                f"pool {key!r} is not registered (registered: {known}); "
                "register it with register_mem_host_pool_v2(host_pool, name) first"
            )
        return entry

    def names(self) -> list[str]:
        """Registered pool names."""
        return list(self._pools)

    def entries(self) -> list[RegisteredPool]:
        """Registered pools, in registration order."""
        return list(self._pools.values())

    def __contains__(self, name: object) -> bool:
        return pool_name_str(name) in self._pools
