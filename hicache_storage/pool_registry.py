"""The host pools a backend serves: per pool its key space, geometry and page buffers.

``register_mem_pool_host`` attaches the main KV pool (``"kv"``); ``register_mem_host_pool_v2``
attaches sidecar pools (Mamba state, SWA window KV, DSA indexer, ...). Each pool gets its own
:class:`~hicache_storage.keys.KeySpace`: the pool name and its geometry and dtype are part of it,
so pages of two pools, or of two deployments whose pools differ, never share a storage key.
Works with :class:`~hicache_storage.host_pool.HostKVPool`, the test kit's sidecar pools and
SGLang's host pools (``get_page_buffer_meta``, or flat page copies where a pool offers no
zero-copy view).
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .errors import ConfigError, InvalidRequestError
from .keys import KeySpace
from .page_buffers import PageBuffers, pool_page_buffers, pool_page_bytes
from .pools import PoolName, pool_name_str

__all__ = ["KNOWN_CONFIG_FIELDS", "PoolRegistry", "RegisteredPool", "pool_keyspace"]

#: Config fields the SDK interprets; any other field of an engine's config enters the key digest.
KNOWN_CONFIG_FIELDS: frozenset[str] = frozenset(
    {
        "tp_rank",
        "tp_size",
        "pp_rank",
        "pp_size",
        "attn_cp_rank",
        "attn_cp_size",
        "is_mla_model",
        "enable_storage_metrics",
        "is_page_first_layout",
        "model_name",
        "tp_lcm_size",
        "should_split_heads",
        "dp_rank",
        "extra_config",
        "dcp_size",
        "dcp_rank",
        "logical_page_size",
        "identity_fields",
    }
)

#: Pools whose state is sharded per tp rank even when the model's KV is replicated (MLA).
_TP_SHARDED_POOLS = frozenset({PoolName.MAMBA.value})

#: Pool attributes that describe a sidecar's geometry (whichever the pool has).
_GEOMETRY_ATTRIBUTES = (
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


def _is_mla(pool: Any) -> bool:
    value = getattr(pool, "is_mla", None)
    if value is None:
        return "MLA" in type(pool).__name__
    return bool(value)


def _describe(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.Size, tuple, list)):
        return "(" + ",".join(_describe(item) for item in value) + ")"
    return str(value)


def _identity_pairs(config: Any) -> tuple[tuple[str, str], ...]:
    """Config fields the SDK does not interpret (e.g. a newer engine's ``model_identity_hash``)."""
    extras: dict[str, Any] = dict(getattr(config, "identity_fields", None) or {})
    if dataclasses.is_dataclass(config):
        for item in dataclasses.fields(config):
            if item.name not in KNOWN_CONFIG_FIELDS:
                extras[item.name] = getattr(config, item.name)
    return tuple(sorted((name, _describe(value)) for name, value in extras.items() if value is not None))


def pool_keyspace(
    config: Any, pool: Any, *, pool_name: str = "kv", namespace: str = "", model_revision: str = ""
) -> KeySpace:
    """The :class:`KeySpace` of ``pool`` (ours or SGLang's) registered as ``pool_name`` under ``config``."""
    is_kv = pool_name == PoolName.KV.value
    is_mla = _is_mla(pool)
    tp_sharded = pool_name in _TP_SHARDED_POOLS or not config.is_mla_model
    geometry: tuple[tuple[str, str], ...] = ()
    if not is_kv:
        geometry = tuple(
            (name, _describe(getattr(pool, name)))
            for name in _GEOMETRY_ATTRIBUTES
            if getattr(pool, name, None) is not None
        )
    return KeySpace(
        model_name=config.model_name or "",
        model_revision=model_revision,
        namespace=namespace,
        dtype=_describe(getattr(pool, "dtype", "unknown")),
        layout=str(getattr(pool, "layout", "unknown")),
        page_size=int(getattr(pool, "page_size", 1) or 1),
        page_bytes=_page_bytes(pool),
        is_mla=is_mla,
        tp_rank=config.tp_rank if tp_sharded else 0,
        tp_size=config.tp_size if tp_sharded else 1,
        pp_rank=config.pp_rank,
        pp_size=config.pp_size,
        cp_rank=config.attn_cp_rank,
        cp_size=config.attn_cp_size,
        pool=pool_name,
        geometry=geometry,
        identity=_identity_pairs(config),
        tp_sharded=None if is_kv else tp_sharded,
    )


def _holds_no_bytes(pool: Any) -> bool:
    """A logical anchor (e.g. DeepSeek-V4's): it has a ``kv_buffer`` attribute set to ``None``."""
    return hasattr(pool, "kv_buffer") and pool.kv_buffer is None


def _page_bytes(pool: Any) -> int:
    if _holds_no_bytes(pool):
        try:
            return pool_page_bytes(pool)
        except (AttributeError, TypeError, ValueError):
            return 0
    return pool_page_bytes(pool)


@functools.lru_cache(maxsize=16)
def _page_offsets(page_size: int) -> torch.Tensor:
    """``0 .. page_size-1`` (cached: a process uses a handful of page sizes)."""
    return torch.arange(page_size, dtype=torch.int64)


@dataclass
class RegisteredPool:
    """One attached host pool: its name, key space and slot geometry."""

    name: str
    pool: Any
    keyspace: KeySpace
    page_size: int
    size: int
    holds_no_bytes: bool
    _zero_copy: bool | None = None

    @classmethod
    def of(cls, name: str, pool: Any, keyspace: KeySpace) -> RegisteredPool:
        """Describe ``pool`` registered as ``name``."""
        return cls(
            name=name,
            pool=pool,
            keyspace=keyspace,
            page_size=int(getattr(pool, "page_size", 1) or 1),
            size=int(getattr(pool, "size", 0) or 0),
            holds_no_bytes=_holds_no_bytes(pool),
        )

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
        pages = flat.view(count, page_size)
        starts = pages[:, 0]
        if page_size > 1 and not torch.equal(pages - starts[:, None], _page_offsets(page_size).expand_as(pages)):
            raise InvalidRequestError(f"{what}: each page's slot indices must be consecutive")
        result: list[int] = starts.tolist()
        size = self.size
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
                views = pool_page_buffers(self.pool, starts)
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
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise InvalidRequestError(f"{what} must hold integer slot indices, got dtype {tensor.dtype}")
    return tensor.reshape(-1).to(torch.int64).cpu()


class PoolRegistry:
    """The pools of one backend instance, by name; ``"kv"`` is the main KV pool."""

    def __init__(self) -> None:
        self._pools: dict[str, RegisteredPool] = {}
        self._lock = threading.Lock()

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
