"""The storage contract's caller side: :class:`HiCacheStorage`, call-compatible with SGLang's class of that name.

Callers (an engine, the pipeline, SGLang through the adapter) use SGLang's methods: v0
(``get``/``batch_get``/``set``/``batch_set``/``exists``), v1 (``batch_get_v1``/``batch_set_v1``
/``batch_exists``) and the multi-pool v2 calls (``register_mem_host_pool_v2``,
``on_host_pools_registered``, ``batch_exists_v2``/``batch_get_v2``/``batch_set_v2``), plus
``batch_exists_each``, ``delete``, the operator calls (``list_pages``, ``delete_stored``,
``read_manifest``, ``clear``) and ``close``.

A :class:`HiCacheStorage` holds one :class:`~hicache_storage.plugin.Backend` (the plugin author's
object) under the SDK's layers (:mod:`hicache_storage.layers`): it validates requests, maps page
hashes to storage keys and pages to buffers, applies hit policies, and leaves chunking, the
resilience guard and timing to the layers. It cannot be subclassed: a backend implements
:class:`~hicache_storage.plugin.Backend` instead.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn, final

import torch

from .capabilities import Capabilities
from .config import HiCacheStorageConfig, HiCacheStorageExtraInfo
from .errors import BackendLoadError, ConfigError, InvalidRequestError, UnsupportedOperation
from .keys import KeySpace, pool_keyspace, validate_key, validate_keys
from .layers.stack import LayerFactory, build_stack
from .listing import KeySpaceManifest, PageListing
from .page_buffers import PageBuffers, tensor_page_buffer
from .plugin.backend import API_VERSION, Backend, BackendSetup
from .pools.context import KV_POOL, BatchContext
from .pools.hits import PoolPresence, fold_pool_hits, leading_run
from .pools.host import group_parts, pool_facts
from .pools.names import PoolHitPolicy, PoolName, PoolTransferResult, pool_name_str
from .pools.plan import PlannedTransfer, plan_exists, plan_transfers
from .pools.registry import PoolRegistry, RegisteredPool
from .pools.shard_plan import shard_space
from .resilience import ResiliencePolicy
from .settings import StorageSettings, check_config
from .stats import StorageStats
from .store_admin import ManifestKeeper, StoreAdmin

__all__ = ["API_VERSION", "HiCacheStorage", "HiCacheStorageConfig", "HiCacheStorageExtraInfo"]

_NOT_A_BASE = (
    "HiCacheStorage is the caller API and cannot be subclassed: since API 2.0 a backend implements "
    "hicache_storage.plugin.Backend (see 'Migrating from API 1' in docs/writing-a-backend.md)"
)


def backend_class(cls: object, what: str) -> type[Backend[Any]]:
    """``cls`` if it is a :class:`~hicache_storage.plugin.Backend` subclass; else :class:`BackendLoadError`."""
    if isinstance(cls, type) and issubclass(cls, Backend):
        return cls
    raise BackendLoadError(f"{what} is {cls!r}, not a subclass of hicache_storage.plugin.Backend")


@final
class HiCacheStorage:
    """L3 storage for one rank: the caller API over a backend.

    ``HiCacheStorage(BackendClass, config)`` builds the backend from ``config`` (backend options in
    ``config.extra_config``); :func:`hicache_storage.load_backend` does the same by entry-point
    name. Call ``register_mem_pool_host(pool)`` before any storage call (storage keys depend on the
    pool's dtype, layout and page size); sidecar pools with ``register_mem_host_pool_v2`` and then
    ``on_host_pools_registered()`` before any v2 call.

    Rules every caller may rely on: invalid requests raise a :class:`ValueError` subclass before
    anything is written; batch calls never raise for backend faults and never return ``None``
    (a failed read is a miss, a failed write ``False``, both counted in ``get_stats()``).

    ``resilience=False`` turns the policy off whatever the config says; ``layers`` are extra layers
    placed right over the backend (the test kit's fault points and capability overrides).
    """

    api_version = API_VERSION

    def __init_subclass__(cls, **kwargs: Any) -> NoReturn:
        raise TypeError(_NOT_A_BASE)

    def __class_getitem__(cls, item: Any) -> NoReturn:
        raise TypeError(_NOT_A_BASE)

    def __init__(
        self,
        backend: type[Backend[Any]],
        config: HiCacheStorageConfig,
        *,
        resilience: bool = True,
        layers: Sequence[LayerFactory] = (),
    ) -> None:
        cls = backend_class(backend, "the backend")
        self.config = check_config(config)
        settings = StorageSettings.from_config(config)
        if not resilience:
            settings = replace(settings, resilience=None)
        #: The SDK's options from ``extra_config`` (namespace, model revision, manifests, pinned, resilience)
        #: and ``io_timeout_s``, the client timeout the backend was given.
        self.settings = settings
        #: The backend's parsed ``Options``.
        self.options: Any = settings.backend_options(cls.Options)
        self.stats = StorageStats()
        self.resilience = ResiliencePolicy(settings.resilience, self.stats) if settings.resilience else None
        declared = cls.capabilities_for(self.options)
        plugin = cls(BackendSetup(self.options, declared, settings.io_timeout_s, self.stats, self.config))
        stack = build_stack(plugin, declared, stats=self.stats, policy=self.resilience, extra=layers)
        self._stack = stack
        self.capabilities: Capabilities = stack.capabilities
        self._admin = StoreAdmin(stack.operator, stack.capabilities, self.stats, cls.__name__)
        keep = settings.manifests and stack.capabilities.supports_list
        self._manifests = ManifestKeeper(self._admin, pinned=settings.pinned) if keep else None
        self._pools = PoolRegistry()
        self._pools_ready = False
        self._closed = False
        self._close_lock = threading.Lock()
        #: The main KV host pool and its key space (set by :meth:`register_mem_pool_host`).
        self.mem_pool_host: Any = None
        self.keyspace: KeySpace | None = None

    # ------------------------------------------------------------ identity
    @property
    def backend(self) -> Backend[Any]:
        """The backend instance this storage holds (for its own tools and its conformance hooks)."""
        return self._stack.backend

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # ------------------------------------------------------------ set-up
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Attach the main KV host pool (a hybrid pool group attaches its anchor and every entry).

        Fixes the KV key space. Raises :class:`ConfigError` for a page too big for the backend.
        """
        parts = group_parts(mem_pool_host)
        if parts is None:
            self._attach(KV_POOL, mem_pool_host)
            return
        anchor, sidecars = parts
        self._attach(KV_POOL, anchor)
        for name, pool in sidecars:
            self._attach(name, pool)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Attach a sidecar host pool under its name (``PoolName`` or str); the same pool again is a no-op.

        Another geometry under a registered name raises :class:`ConfigError` naming the pool.
        """
        name = pool_name_str(host_pool_name)
        try:
            validate_key(name)
        except InvalidRequestError as exc:
            raise ConfigError("host_pool_name", f"{name!r} cannot name a pool: {exc}") from None
        self._attach(name, host_pool)

    def on_host_pools_registered(self) -> None:
        """The pool set is complete (fires once per attach); v2 calls are accepted from now on."""
        if self.keyspace is None:
            raise ConfigError(
                "mem_pool_host", "register_mem_pool_host(pool) must come before on_host_pools_registered()"
            )
        self._pools_ready = True

    def _attach(self, name: str, pool: Any) -> None:
        facts = pool_facts(pool)
        limit = self.capabilities.max_page_bytes
        if limit is not None and not facts.holds_no_bytes and facts.page_bytes > limit:
            raise ConfigError(
                f"pool {name!r}", f"pages of {facts.page_bytes} bytes exceed this backend's max_page_bytes={limit}"
            )
        space = pool_keyspace(
            self.config,
            facts,
            pool_name=name,
            namespace=self.settings.namespace,
            model_revision=self.settings.model_revision,
        )
        space, shards = shard_space(name, self.config, self.settings, facts, space, off=self._pools.shards_off)
        if self._pools.add(RegisteredPool(name, pool, space, facts, shards=shards)):
            self._stack.engine.on_register_pool(pool, space)
        if name == KV_POOL:
            self.mem_pool_host = pool
            self.keyspace = space

    def registered_pools(self) -> dict[str, Any]:
        """Attached host pools by name (``"kv"`` is the main KV pool)."""
        return {entry.name: entry.pool for entry in self._pools.entries()}

    def pool_keyspace(self, name: object = KV_POOL) -> KeySpace:
        """The key space of a registered pool; raises :class:`InvalidRequestError` for an unknown one."""
        return self._pools.get(name).keyspace

    def batch_context(self, pool: object = KV_POOL, extra_info: Any = None) -> BatchContext:
        """The context a primitive call for a registered pool receives (for tools that call primitives)."""
        entry = self._pools.get(pool)
        prefix = getattr(extra_info, "prefix_keys", None)
        more = getattr(extra_info, "extra_info", None)
        return BatchContext(
            pool=entry.name,
            keyspace=entry.keyspace,
            prefix_keys=tuple(prefix) if isinstance(prefix, (list, tuple)) else (),
            extra_info=more if isinstance(more, dict) else None,
        )

    def _ready(self) -> RegisteredPool:
        if self._closed:
            raise InvalidRequestError(f"{type(self.backend).__name__} storage is closed")
        if self.keyspace is None:
            raise InvalidRequestError(
                "register_mem_pool_host(pool) must be called before storage calls: "
                "storage keys depend on the pool's dtype, layout and page size"
            )
        return self._pools.get(KV_POOL)

    def _ready_v2(self) -> None:
        self._ready()
        if not self._pools_ready:
            raise InvalidRequestError(
                "multi-pool calls need the pool set first: register_mem_host_pool_v2(...) for each sidecar pool, "
                "then on_host_pools_registered()"
            )

    @staticmethod
    def _with_bytes(entry: RegisteredPool) -> RegisteredPool:
        if entry.holds_no_bytes:
            raise InvalidRequestError(f"pool {entry.name!r} holds no bytes (its kv_buffer is None): nothing to move")
        return entry

    # ------------------------------------------------------------ moving pages
    def _exists_in(self, entry: RegisteredPool, keys: list[str], extra_info: Any) -> list[bool]:
        skeys = entry.record_keys(keys)
        return entry.per_page(self._stack.engine.pages_exist(skeys, self.batch_context(entry.name, extra_info)))

    def _move(self, op: str, entry: RegisteredPool, keys: list[str], starts: list[int], extra_info: Any) -> list[bool]:
        """Read (``op="get"``) or write (``"set"``) ``keys`` at slot ``starts`` of ``entry``'s pool."""
        pages, after_read = entry.pages(starts)
        results = self._pages(op, entry, keys, pages, extra_info)
        if after_read is not None and op == "get":
            after_read(results)
        return results

    def _pages(
        self, op: str, entry: RegisteredPool, keys: list[str], pages: list[PageBuffers], extra: Any
    ) -> list[bool]:
        skeys = entry.record_keys(keys)
        context = self.batch_context(entry.name, extra)
        records, scatter = entry.records(op, pages)
        if op == "get":
            found = entry.per_page(self._stack.engine.read_pages(skeys, records, context))
            return scatter(found) if scatter is not None else found
        results = entry.per_page(self._stack.engine.write_pages(skeys, records, context))
        if self._manifests is not None and any(results):
            self._manifests.after_write(entry.keyspace, context)
        return results

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
        entry = self._with_bytes(self._ready())
        keys = validate_keys(keys)
        starts = entry.page_starts(len(keys), host_indices)
        return self._move(op, entry, keys, starts, extra_info) if keys else []

    # ------------------------------------------------------------ existence
    def batch_exists_each(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Per-key existence of KV pages: one bool per key, so a partial hit is not mistaken for a miss."""
        entry = self._ready()
        keys = validate_keys(keys)
        if not keys:
            return []
        if entry.holds_no_bytes:
            return [True] * len(keys)
        return self._exists_in(entry, keys, extra_info)

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
        self._ready_v2()
        keys = validate_keys(keys)
        steps = plan_exists(self._pools, pool_transfers)
        kv = self._pools.get(KV_POOL)
        if not keys:
            return PoolTransferResult(0, {}, [])
        kv_pages = len(keys) if kv.holds_no_bytes else leading_run(self._exists_in(kv, keys, extra_info))
        presence: list[PoolPresence] = []
        for step in steps:
            if not kv_pages:
                break
            wanted = step.keys if step.policy is PoolHitPolicy.BLOCK_GROUPS else keys[:kv_pages]
            flags = self._exists_in(step.entry, wanted, extra_info) if wanted else []
            presence.append(
                PoolPresence(step.name, step.policy, flags, step.window, step.block_pages, step.group_pages)
            )
        return fold_pool_hits(kv_pages, presence, kv_name=PoolName.KV)

    def batch_get_v2(
        self, transfers: Sequence[Any], extra_info: HiCacheStorageExtraInfo | None = None, *, strict: bool = True
    ) -> dict[Any, list[bool]]:
        """Read each transfer's pages into its pool's host slots; one list of bools per pool name.

        A malformed transfer raises :class:`InvalidRequestError` before any byte moves; with
        ``strict=False`` it fails alone instead (all ``False``, counted as ``malformed_transfers``).
        """
        return self._move_v2("get", transfers, extra_info, strict)

    def batch_set_v2(
        self, transfers: Sequence[Any], extra_info: HiCacheStorageExtraInfo | None = None, *, strict: bool = True
    ) -> dict[Any, list[bool]]:
        """Write each transfer's pages from its pool's host slots; one list of bools per pool name.

        ``strict`` as for :meth:`batch_get_v2`.
        """
        return self._move_v2("set", transfers, extra_info, strict)

    def _move_v2(self, op: str, transfers: Sequence[Any], extra_info: Any, strict: bool) -> dict[Any, list[bool]]:
        self._ready_v2()
        planned: list[PlannedTransfer] = plan_transfers(self._pools, transfers)
        if strict:
            for item in planned:
                if item.error is not None:
                    raise item.error
        results: dict[Any, list[bool]] = {}
        for item in planned:
            if item.step is None:
                self.stats.bump("malformed_transfers")
                self.stats.note(f"batch_{op}_v2: {item.error}")
                done = [False] * item.pages
            elif item.step.keys:
                done = self._move(op, item.step.entry, item.step.keys, item.step.starts, extra_info)
            else:
                done = []
            if item.name is not None:
                results[item.name] = results.get(item.name, []) + done
        return results

    # ------------------------------------------------------------ SGLang v0
    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        """Read flat pages; each result is the filled target tensor, or ``None`` for a miss.

        ``target_locations`` (optional) are flat CPU tensors of one page each, filled in place;
        without them, new tensors from the pool's ``get_dummy_flat_data_page()`` are returned.
        """
        entry = self._with_bytes(self._ready())
        keys = validate_keys(keys)
        if target_locations is None:
            targets = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        else:
            targets = list(target_locations)
            if len(targets) != len(keys):
                raise InvalidRequestError(f"target_locations has {len(targets)} entries for {len(keys)} keys")
        pages = [self._flat(t, entry, f"target_locations[{i}]") for i, t in enumerate(targets)]
        if not keys:
            return []
        hits = self._pages("get", entry, keys, pages, None)
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
        entry = self._with_bytes(self._ready())
        keys = validate_keys(keys)
        if values is None:
            raise InvalidRequestError("values is required: one flat page tensor per key")
        values = list(values)
        if len(values) != len(keys):
            raise InvalidRequestError(f"values has {len(values)} entries for {len(keys)} keys")
        pages = [self._flat(v, entry, f"values[{i}]") for i, v in enumerate(values)]
        return self._pages("set", entry, keys, pages, None) if keys else []

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        """Write one flat page."""
        return self.batch_set([validate_key(key)], [value])

    @staticmethod
    def _flat(tensor: Any, entry: RegisteredPool, what: str) -> PageBuffers:
        return tensor_page_buffer(tensor, entry.facts.page_bytes, what)

    # ------------------------------------------------------------ maintenance
    def delete(self, keys: list[str], pool: object = KV_POOL) -> list[bool]:
        """Remove pages of ``pool`` (default the KV pool); one bool per key (``True`` = absent afterwards).

        Needs ``supports_delete``.
        """
        self._ready()
        entry = self._pools.get(pool)
        keys = validate_keys(keys)
        if not self.capabilities.supports_delete:
            raise UnsupportedOperation(f"{type(self.backend).__name__} does not declare supports_delete")
        if not keys:
            return []
        return entry.per_page(self._stack.engine.delete_pages(entry.record_keys(keys), self.batch_context(entry.name)))

    def list_pages(self, prefix: str = "", *, limit: int = 1000, cursor: str | None = None) -> PageListing:
        """Stored records (pages and key-space manifests) under ``prefix``, paged; needs ``supports_list``.

        ``prefix`` is ``""`` (everything under this backend's location, every key space) or a
        key-space prefix (``keyspace.prefix``). Faults raise :class:`~hicache_storage.BackendFault`.
        """
        return self._admin.list_pages(prefix, limit=limit, cursor=cursor)

    def delete_stored(self, storage_keys: Sequence[str]) -> list[bool]:
        """Remove records by storage key (as :meth:`list_pages` lists them); needs ``supports_delete``."""
        return self._admin.delete_stored(storage_keys)

    def read_manifest(self, space_or_key: KeySpace | str) -> KeySpaceManifest | None:
        """The stored manifest of a key space (or under a manifest's storage key); ``None`` if absent or damaged."""
        return self._admin.read_manifest(space_or_key)

    def clear(self, everything: bool = False) -> None:
        """Remove this instance's pages: every page of each registered pool's key space. Needs ``supports_clear``.

        ``everything=True`` removes every page under the backend's configured location, whatever
        its key space (other models, ranks or tenants sharing the location included). Before any
        pool is registered, ``clear()`` has no key space and removes nothing. Faults are counted,
        not raised; :class:`UnsupportedOperation` if the capability is absent.
        """
        if self._closed:
            raise InvalidRequestError(f"{type(self.backend).__name__} storage is closed")
        if not self.capabilities.supports_clear:
            raise UnsupportedOperation(f"{type(self.backend).__name__} does not declare supports_clear")
        prefixes = None if everything else sorted({entry.keyspace.prefix for entry in self._pools.entries()})
        if prefixes == []:
            return
        try:
            self._stack.engine.clear_pages(prefixes)
        except Exception as error:
            self.stats.fault("clear", error)

    def get_stats(self) -> dict[str, Any]:
        """Counters per operation, named counters, fault totals and resilience state."""
        snapshot = self.stats.snapshot()
        snapshot["backend"] = type(self.backend).__name__
        snapshot["resilience"] = self.resilience.snapshot() if self.resilience else None
        return snapshot

    def close(self) -> None:
        """Release the backend's resources; idempotent. Later storage calls raise :class:`InvalidRequestError`."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._stack.engine.release()

    def __enter__(self) -> HiCacheStorage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        name = type(self.backend).__name__
        return f"<HiCacheStorage backend={name} api_version={self.api_version} closed={self._closed}>"
