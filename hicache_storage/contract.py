"""The storage contract: :class:`HiCacheStorage`, call-compatible with SGLang's class of that name.

Two faces, as an HTTP client is separate from its transport:

- **Callers** (an engine, the pipeline, SGLang through the adapter) use SGLang's methods: v0
  (``get``/``batch_get``/``set``/``batch_set``/``exists``), v1 (``batch_get_v1``/``batch_set_v1``
  /``batch_exists``) and the multi-pool v2 calls (``register_mem_host_pool_v2``,
  ``on_host_pools_registered``, ``batch_exists_v2``/``batch_get_v2``/``batch_set_v2``), plus
  ``batch_exists_each``, ``delete``, the operator calls (``list_pages``, ``delete_stored``,
  ``clear``) and ``close``. Plugins do not override these.
- **Plugin authors** implement the primitives of :class:`~hicache_storage.plugin.StoragePrimitives`
  (``write_pages``, ``read_pages``, ``pages_exist`` and the optional ones).

Validation, key mapping, batching to ``max_batch_size``, fault handling (an exception in a
primitive becomes misses / ``False`` and is counted), hit policies and statistics are inherited,
so every backend serves every pool with no pool-specific code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .batch_context import KV_POOL, BatchContext
from .capabilities import Capabilities
from .config import HiCacheStorageConfig, HiCacheStorageExtraInfo
from .errors import InvalidRequestError
from .keys import validate_key, validate_keys
from .listing import PageListing
from .page_buffers import PageBuffers, tensor_page_buffer
from .plugin.primitives import API_VERSION, OptionsT, UnsupportedOperation, takes_context
from .pool_hits import PoolPresence, fold_pool_hits, leading_run
from .pools import PoolHitPolicy, PoolName, PoolTransferResult
from .storage_core import StorageCore, keyspace_for
from .store_admin import delete_stored, list_pages
from .transfer_plan import TransferStep, plan_exists, plan_transfers

__all__ = [
    "API_VERSION",
    "BatchContext",
    "Capabilities",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "PageBuffers",
    "UnsupportedOperation",
    "keyspace_for",
]


class HiCacheStorage(StorageCore[OptionsT]):
    """Abstract L3 storage backend.

    Construct with a :class:`HiCacheStorageConfig`; backend options come from
    ``config.extra_config`` parsed into the class's ``Options`` dataclass (``self.options``; a
    backend declares its type as ``class MyBackend(HiCacheStorage[MyOptions])``).
    Call ``register_mem_pool_host(pool)`` before any storage call (storage keys depend on the
    pool's dtype, layout and page size); sidecar pools with ``register_mem_host_pool_v2`` and
    then ``on_host_pools_registered()`` before any v2 call.

    Rules every caller may rely on: invalid requests raise a :class:`ValueError` subclass before
    anything is written; batch calls never raise for backend faults and never return ``None``
    (a failed read is a miss, a failed write ``False``, both counted in ``get_stats()``).
    Reserved for the base class: every attribute whose name starts with ``_hc``, and ``config``,
    ``options``, ``stats``, ``resilience``, ``capabilities``, ``mem_pool_host``, ``keyspace``,
    ``namespace``, ``model_revision``.
    """

    # ------------------------------------------------------------ SGLang v1
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Read KV pages straight into host-pool slots; one bool per key (``False`` = miss)."""
        return self._move_v1("get", keys, host_indices, extra_info)

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Write KV pages straight from host-pool slots; one bool per key (``True`` = stored)."""
        return self._move_v1("set", keys, host_indices, extra_info)

    def _move_v1(self, op: str, keys: list[str], host_indices: Any, extra_info: Any) -> list[bool]:
        entry = self._require_bytes(self._require_ready())
        keys = validate_keys(keys)
        starts = entry.page_starts(len(keys), host_indices)
        if not keys:
            return []
        return self._move(op, entry, keys, starts, self._context(entry, extra_info))

    # ------------------------------------------------------------ existence
    def batch_exists_each(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Per-key existence of KV pages: one bool per key, so a partial hit is not mistaken for a miss."""
        entry = self._require_ready()
        keys = validate_keys(keys)
        if not keys:
            return []
        if entry.holds_no_bytes:
            return [True] * len(keys)
        return self._exists_in(entry, keys, self._context(entry, extra_info))

    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """Number of consecutive existing keys from the start of ``keys`` (SGLang semantics)."""
        return leading_run(self.batch_exists_each(keys, extra_info))

    def exists(self, key: str) -> bool:
        """Whether one key is stored."""
        return self.batch_exists_each([validate_key(key)])[0]

    # ------------------------------------------------------------ SGLang v2 (multi-pool)
    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: Sequence[Any] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        """Longest prefix of ``keys`` restorable with KV and every gating sidecar (rules: ``docs/contract.md``).

        Sidecar pages are looked up under the KV page hashes they sit at (``keys``), except a
        ``BLOCK_GROUPS`` pool, which names its own keys. The answer's ``restorable_prefix_pages``
        lists every restorable prefix length, for callers that intersect them across ranks.
        """
        self._require_v2()
        keys = validate_keys(keys)
        steps = plan_exists(self._hc_pools, pool_transfers)
        kv = self._hc_pools.get(KV_POOL)
        if not keys:
            return PoolTransferResult(0, {}, [])
        kv_pages = (
            len(keys) if kv.holds_no_bytes else leading_run(self._exists_in(kv, keys, self._context(kv, extra_info)))
        )
        presence: list[PoolPresence] = []
        for step in steps:
            if not kv_pages:
                break
            wanted = step.keys if step.policy is PoolHitPolicy.BLOCK_GROUPS else keys[:kv_pages]
            flags = self._exists_in(step.entry, wanted, self._context(step.entry, extra_info)) if wanted else []
            presence.append(
                PoolPresence(step.name, step.policy, flags, step.window, step.block_pages, step.group_pages)
            )
        return fold_pool_hits(kv_pages, presence, kv_name=PoolName.KV)

    def batch_get_v2(
        self, transfers: Sequence[Any], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[Any, list[bool]]:
        """Read each transfer's pages into its pool's host slots; one list of bools per pool name."""
        return self._move_v2("get", transfers, extra_info)

    def batch_set_v2(
        self, transfers: Sequence[Any], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[Any, list[bool]]:
        """Write each transfer's pages from its pool's host slots; one list of bools per pool name."""
        return self._move_v2("set", transfers, extra_info)

    def _move_v2(self, op: str, transfers: Sequence[Any], extra_info: Any) -> dict[Any, list[bool]]:
        self._require_v2()
        steps: list[TransferStep] = plan_transfers(self._hc_pools, transfers)
        results: dict[Any, list[bool]] = {}
        for step in steps:
            done = (
                self._move(op, step.entry, step.keys, step.starts, self._context(step.entry, extra_info))
                if step.keys
                else []
            )
            results[step.name] = results.get(step.name, []) + done
        return results

    # ------------------------------------------------------------ SGLang v0
    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        """Read flat pages; each result is the filled target tensor, or ``None`` for a miss.

        ``target_locations`` (optional) are flat CPU tensors of one page each, filled in place;
        without them, new tensors from the pool's ``get_dummy_flat_data_page()`` are returned.
        """
        entry = self._require_bytes(self._require_ready())
        space = entry.keyspace
        keys = validate_keys(keys)
        pool = self.mem_pool_host
        if target_locations is None:
            targets = [pool.get_dummy_flat_data_page() for _ in keys]
        else:
            targets = list(target_locations)
            if len(targets) != len(keys):
                raise InvalidRequestError(f"target_locations has {len(targets)} entries for {len(keys)} keys")
        pages = [tensor_page_buffer(t, space.page_bytes, f"target_locations[{i}]") for i, t in enumerate(targets)]
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        context = self._context(entry, None)
        hits = self._timed(
            "get", len(keys), lambda: self._guarded("get", skeys, pages, context, "read_pages"), space.page_bytes
        )
        return [target if hit else None for target, hit in zip(targets, hits, strict=True)]

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        """Read one flat page (see :meth:`batch_get`)."""
        targets = None if target_location is None else [target_location]
        return self.batch_get([validate_key(key)], targets)[0]

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        """Write flat pages (``values``: one flat CPU tensor per key); ``True`` only if all were stored."""
        return all(self.batch_set_each(keys, values))

    def batch_set_each(self, keys: list[str], values: Any) -> list[bool]:
        """Write flat pages; one bool per key."""
        entry = self._require_bytes(self._require_ready())
        space = entry.keyspace
        keys = validate_keys(keys)
        if values is None:
            raise InvalidRequestError("values is required: one flat page tensor per key")
        values = list(values)
        if len(values) != len(keys):
            raise InvalidRequestError(f"values has {len(values)} entries for {len(keys)} keys")
        pages = [tensor_page_buffer(v, space.page_bytes, f"values[{i}]") for i, v in enumerate(values)]
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        context = self._context(entry, None)
        return self._timed(
            "set", len(keys), lambda: self._guarded("set", skeys, pages, context, "write_pages"), space.page_bytes
        )

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        """Write one flat page."""
        return self.batch_set([validate_key(key)], [value])

    # ------------------------------------------------------------ maintenance
    def delete(self, keys: list[str], pool: object = KV_POOL) -> list[bool]:
        """Remove pages of ``pool`` (default the KV pool); one bool per key (``True`` = absent afterwards).

        Needs ``supports_delete``.
        """
        self._require_ready()
        entry = self._hc_pools.get(pool)
        keys = validate_keys(keys)
        if not self.capabilities.supports_delete:
            raise UnsupportedOperation(f"{type(self).__name__} does not declare supports_delete")
        if not keys:
            return []
        skeys = entry.keyspace.storage_keys_unchecked(keys)
        context = self._context(entry, None)
        return self._timed(
            "delete", len(keys), lambda: self._guarded("delete", skeys, None, context, "delete_pages"), 0
        )

    def list_pages(self, prefix: str = "", *, limit: int = 1000, cursor: str | None = None) -> PageListing:
        """Stored records (pages and key-space manifests) under ``prefix``, paged; needs ``supports_list``.

        ``prefix`` is ``""`` (everything under this backend's location, every key space) or a
        key-space prefix (``keyspace.prefix``). Faults raise :class:`~hicache_storage.BackendFault`.
        """
        return list_pages(self, prefix, limit=limit, cursor=cursor)

    def delete_stored(self, storage_keys: Sequence[str]) -> list[bool]:
        """Remove records by storage key (as :meth:`list_pages` lists them); needs ``supports_delete``."""
        return delete_stored(self, storage_keys)

    def clear(self, everything: bool = False) -> None:
        """Remove this instance's pages: every page of each registered pool's key space. Needs ``supports_clear``.

        ``everything=True`` removes every page under the backend's configured location, whatever
        its key space (other models, ranks or tenants sharing the location included). Before any
        pool is registered, ``clear()`` has no key space and removes nothing. A backend whose
        ``clear_pages`` takes no argument removes everything either way. Faults are counted, not
        raised; :class:`UnsupportedOperation` if the capability is absent.
        """
        if self._hc_closed:
            raise InvalidRequestError(f"{type(self).__name__} is closed")
        if not self.capabilities.supports_clear:
            raise UnsupportedOperation(f"{type(self).__name__} does not declare supports_clear")
        prefixes = None if everything else [self.pool_keyspace(name).prefix for name in self.registered_pools()]
        try:
            if not takes_context(type(self).clear_pages, 0):
                self.clear_pages()  # type: ignore[call-arg]  # written before clear_pages took prefixes
            elif prefixes is None or prefixes:
                self.clear_pages(sorted(set(prefixes)) if prefixes is not None else None)
        except Exception as error:
            self.stats.fault("clear", error)

