"""The storage contract: :class:`HiCacheStorage`, call-compatible with SGLang's class of that name.

Two faces, as an HTTP client is separate from its transport:

- **Callers** (an engine, the pipeline, SGLang through the adapter) use SGLang's methods: v0
  (``get``/``batch_get``/``set``/``batch_set``/``exists``), v1 (``batch_get_v1``/``batch_set_v1``
  /``batch_exists``) and the multi-pool v2 calls (``register_mem_host_pool_v2``,
  ``on_host_pools_registered``, ``batch_exists_v2``/``batch_get_v2``/``batch_set_v2``), plus
  ``batch_exists_each``, ``delete`` and ``close``. Plugins do not override these.
- **Plugin authors** implement primitives that receive *storage keys* (mapped through the pool's
  :class:`~hicache_storage.keys.KeySpace`), pages as lists of memoryviews, and a
  :class:`~hicache_storage.batch_context.BatchContext` naming the pool and its page size:

  - ``write_pages(keys, pages, context) -> list[bool]``: store each page; visible to
    ``pages_exist`` only once fully stored.
  - ``read_pages(keys, pages, context) -> list[bool]``: fill each page's segments; ``False`` for
    a missing page or one failing its checks.
  - ``pages_exist(keys, context) -> list[bool]``: one bool per key.

  Optional: ``delete_pages(keys, context)``, ``clear_pages(prefixes)``, ``list_stored``, ``release()``,
  ``on_register_pool(pool, keyspace)`` and the classmethod ``capabilities_for(options)``.

Validation, key mapping, batching to ``max_batch_size``, fault handling (an exception in a
primitive becomes misses / ``False`` and is counted), hit policies and statistics are inherited,
so every backend serves every pool with no pool-specific code.
"""

from __future__ import annotations

import inspect
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import torch

from .batch_context import KV_POOL, BatchContext
from .capabilities import Capabilities
from .config import SDK_OPTION_NAMES, HiCacheStorageConfig, HiCacheStorageExtraInfo
from .errors import ConfigError, InvalidRequestError
from .keys import KeySpace, validate_key, validate_keys
from .listing import PageListing, StoredPage
from .options import NoOptions, parse_options
from .page_buffers import PageBuffers, pool_page_bytes, tensor_page_buffer
from .pool_hits import PoolPresence, fold_pool_hits, leading_run
from .pool_registry import PoolRegistry, RegisteredPool, pool_keyspace
from .pools import PoolHitPolicy, PoolName, PoolTransferResult, pool_name_str
from .resilience import ResilienceOptions, ResiliencePolicy
from .stats import StorageStats
from .store_admin import ManifestKeeper, delete_stored, list_pages
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

#: Version of this contract ("MAJOR.MINOR"); a plugin must share MAJOR and not exceed MINOR.
#: 1.1: multi-pool (v2) calls; primitives receive a :class:`BatchContext`.
API_VERSION = "1.1"

T = TypeVar("T")
Primitive = Callable[[list[str], Any, BatchContext], list[bool]]

#: Primitive name -> positional parameters before ``context`` (a primitive written for API 1.0 lacks it).
_PRIMITIVE_ARITY = {"write_pages": 2, "read_pages": 2, "pages_exist": 1, "delete_pages": 1}


class UnsupportedOperation(NotImplementedError):
    """The backend does not declare the capability this call needs (``delete``, ``clear``)."""


def keyspace_for(
    config: HiCacheStorageConfig, pool: Any, *, namespace: str = "", model_revision: str = "", pool_name: str = KV_POOL
) -> KeySpace:
    """The :class:`KeySpace` of ``config`` with host pool ``pool`` (ours or SGLang's) registered as ``pool_name``."""
    return pool_keyspace(config, pool, pool_name=pool_name, namespace=namespace, model_revision=model_revision)


def _takes_context(function: Any, before: int) -> bool:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return True
    if parameters and parameters[0].name == "self":
        parameters = parameters[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters) or any(p.name == "context" for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) > before


class HiCacheStorage(ABC):
    """Abstract L3 storage backend.

    Construct with a :class:`HiCacheStorageConfig`; backend options come from
    ``config.extra_config`` parsed into the class's ``Options`` dataclass (``self.options``).
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

    api_version: ClassVar[str] = API_VERSION
    #: Declared capabilities; an instance's may differ by its options (see :meth:`capabilities_for`).
    capabilities: Capabilities = Capabilities()
    Options: ClassVar[type[Any]] = NoOptions
    #: Client I/O timeout (seconds) of a backend whose resilience policy is off (see :attr:`io_timeout_s`).
    DEFAULT_IO_TIMEOUT_S: ClassVar[float] = 5.0
    _hc_legacy: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._hc_legacy = frozenset(
            name for name, before in _PRIMITIVE_ARITY.items() if not _takes_context(getattr(cls, name), before)
        )

    def __init__(self, config: HiCacheStorageConfig) -> None:
        if not isinstance(config, HiCacheStorageConfig) and not _looks_like_config(config):
            raise ConfigError("config", f"expected a HiCacheStorageConfig, got {type(config).__name__}")
        self.config = config
        if config.extra_config is not None and not isinstance(config.extra_config, dict):
            raise ConfigError("extra_config", f"expected a dict (or None), got {type(config.extra_config).__name__}")
        extra = dict(config.extra_config or {})
        namespace = extra.get("namespace", "")
        if not isinstance(namespace, str):
            raise ConfigError("extra_config.namespace", f"expected a str, got {namespace!r}")
        revision = extra.get("model_revision", "")
        if not isinstance(revision, str):
            raise ConfigError("extra_config.model_revision", f"expected a str, got {revision!r}")
        self.namespace = namespace
        self.model_revision = revision
        manifests = extra.get("manifests", True)
        if not isinstance(manifests, bool):
            raise ConfigError("extra_config.manifests", f"expected true or false, got {manifests!r}")
        pinned = extra.get("pinned", False)
        if not isinstance(pinned, bool):
            raise ConfigError("extra_config.pinned", f"expected true or false, got {pinned!r}")
        #: Whether this deployment's key spaces are pinned: age-based purges and the SDK's own eviction skip them.
        self.pinned = pinned
        backend_values = {k: v for k, v in extra.items() if k not in SDK_OPTION_NAMES}
        self.options = parse_options(self.Options, backend_values)
        self.capabilities = type(self).capabilities_for(self.options)
        self.stats = StorageStats()
        resilience_options = ResilienceOptions.from_config(extra.get("resilience"))
        self.resilience: ResiliencePolicy | None = (
            ResiliencePolicy(resilience_options, self.stats) if resilience_options else None
        )
        self.mem_pool_host: Any = None
        self.keyspace: KeySpace | None = None
        self._hc_pools = PoolRegistry()
        self._hc_manifests = (
            ManifestKeeper(pinned=self.pinned) if manifests and self.capabilities.supports_list else None
        )
        self._hc_pools_ready = False
        self._hc_closed = False
        self._hc_close_lock = threading.Lock()

    def _primitive(self, name: str) -> Primitive:
        """The primitive ``name`` as a three-argument call (wrapping one written for API 1.0)."""
        method: Callable[..., list[bool]] = getattr(self, name)
        takes_pages = _PRIMITIVE_ARITY[name] == 2
        if name in self._hc_legacy:  # written for API 1.0: no context
            if takes_pages:
                return lambda keys, pages, _context: method(keys, pages)
            return lambda keys, _pages, _context: method(keys)
        if takes_pages:
            return method
        return lambda keys, _pages, context: method(keys, context)

    @classmethod
    def capabilities_for(cls, options: Any) -> Capabilities:
        """Capabilities of an instance built with ``options`` (default: the class's declaration)."""
        return cls.capabilities

    # ------------------------------------------------------------ primitives
    @abstractmethod
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Store each page under its storage key; ``True`` once the whole page is readable."""

    @abstractmethod
    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Fill each page's segments from storage; ``False`` for a miss or a page failing checks."""

    @abstractmethod
    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Whether each storage key holds a complete page."""

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """Remove pages; ``True`` when the key is absent afterwards. Needs ``supports_delete``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support delete")

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove stored pages: those whose storage key starts with one of ``prefixes`` (the registered
        pools' key-space prefixes), or, with ``prefixes=None``, every page under the configured location.

        A backend whose ``clear_pages`` takes no argument (written before this signature) is called
        without one and is expected to remove everything.
        """
        raise UnsupportedOperation(f"{type(self).__name__} does not support clear")

    def list_stored(self, prefix: str, cursor: str | None, limit: int) -> tuple[list[StoredPage], str | None]:
        """Up to ``limit`` stored records whose storage key starts with ``prefix`` (``""``: all under the
        configured location), and an opaque cursor for the next call (``None`` when done). Needs ``supports_list``.
        """
        raise UnsupportedOperation(f"{type(self).__name__} does not support listing")

    def release(self) -> None:
        """Free connections and other resources (called once by :meth:`close`)."""

    def on_register_pool(self, pool: Any, keyspace: KeySpace) -> None:
        """Hook for zero-copy backends to register a pool's memory; called once per newly attached pool."""

    # ------------------------------------------------------------ set-up
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Attach the main KV host pool (a host pool group attaches its anchor and every entry).

        Fixes the KV key space. Raises :class:`ConfigError` for a page too big for the backend.
        """
        anchor_entry = getattr(mem_pool_host, "anchor_entry", None)
        if anchor_entry is not None and hasattr(mem_pool_host, "entries"):
            self._attach(KV_POOL, anchor_entry.host_pool)
            for entry in mem_pool_host.entries:
                if entry is not anchor_entry:
                    self._attach(pool_name_str(entry.name), entry.host_pool)
            return
        self._attach(KV_POOL, mem_pool_host)

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
        self._hc_pools_ready = True

    def _attach(self, name: str, pool: Any) -> None:
        page_bytes = pool_page_bytes(pool) if getattr(pool, "kv_buffer", True) is not None else 0
        limit = self.capabilities.max_page_bytes
        if limit is not None and page_bytes > limit:
            raise ConfigError(
                f"pool {name!r}", f"pages of {page_bytes} bytes exceed this backend's max_page_bytes={limit}"
            )
        space = keyspace_for(
            self.config, pool, namespace=self.namespace, model_revision=self.model_revision, pool_name=name
        )
        if self._hc_pools.add(RegisteredPool.of(name, pool, space)):
            if _takes_context(type(self).on_register_pool, 1):
                self.on_register_pool(pool, space)
            else:  # a hook written for API 1.0
                self.on_register_pool(pool)  # type: ignore[call-arg]
        if name == KV_POOL:
            self.mem_pool_host = pool
            self.keyspace = space

    def registered_pools(self) -> dict[str, Any]:
        """Attached host pools by name (``"kv"`` is the main KV pool)."""
        return {entry.name: entry.pool for entry in self._hc_pools.entries()}

    def pool_keyspace(self, name: object = KV_POOL) -> KeySpace:
        """The key space of a registered pool; raises :class:`InvalidRequestError` for an unknown one."""
        return self._hc_pools.get(name).keyspace

    def batch_context(self, pool: object = KV_POOL) -> BatchContext:
        """The context a primitive call for a registered pool receives (for tools and tests that call primitives)."""
        return self._context(self._hc_pools.get(pool), None)

    def _require_ready(self) -> RegisteredPool:
        if self._hc_closed:
            raise InvalidRequestError(f"{type(self).__name__} is closed")
        if self.keyspace is None:
            raise InvalidRequestError(
                "register_mem_pool_host(pool) must be called before storage calls: "
                "storage keys depend on the pool's dtype, layout and page size"
            )
        return self._hc_pools.get(KV_POOL)

    def _require_v2(self) -> None:
        self._require_ready()
        if not self._hc_pools_ready:
            raise InvalidRequestError(
                "multi-pool calls need the pool set first: register_mem_host_pool_v2(...) for each sidecar pool, "
                "then on_host_pools_registered()"
            )

    def _require_bytes(self, entry: RegisteredPool) -> RegisteredPool:
        if entry.holds_no_bytes:
            raise InvalidRequestError(f"pool {entry.name!r} holds no bytes (its kv_buffer is None): nothing to move")
        return entry

    @staticmethod
    def _context(entry: RegisteredPool, extra_info: Any) -> BatchContext:
        prefix = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
        more = getattr(extra_info, "extra_info", None) if extra_info is not None else None
        return BatchContext(
            pool=entry.name,
            keyspace=entry.keyspace,
            prefix_keys=tuple(prefix) if isinstance(prefix, (list, tuple)) else (),
            extra_info=more if isinstance(more, dict) else None,
        )

    # ------------------------------------------------------------ dispatch
    def _guarded(self, op: str, skeys: list[str], payload: Any, context: BatchContext, primitive: str) -> list[bool]:
        """Run a primitive over chunks of ``max_batch_size``; faults become ``False``."""
        call = self._primitive(primitive)
        results: list[bool] = []
        step = max(1, int(self.capabilities.max_batch_size or len(skeys) or 1))
        for begin in range(0, len(skeys), step):
            chunk_keys = skeys[begin : begin + step]
            chunk_payload = payload[begin : begin + step] if payload is not None else None
            results.extend(self._call_chunk(op, call, (primitive, chunk_keys, chunk_payload), context))
        return results

    def _call_chunk(
        self, op: str, call: Primitive, request: tuple[str, list[str], Any], context: BatchContext
    ) -> list[bool]:
        name, keys, payload = request

        def attempt() -> list[bool]:
            out = call(keys, payload, context)
            if not isinstance(out, list) or len(out) != len(keys):
                self.stats.bump("contract_violations")
                raise TypeError(
                    f"{type(self).__name__}.{name} returned {type(out).__name__} "
                    f"of length {len(out) if isinstance(out, list) else '?'} for {len(keys)} keys"
                )
            return [item is True for item in out]

        try:
            if self.resilience is not None:
                return self.resilience.call(op, attempt, idempotent=True)
            return attempt()
        except Exception as error:  # faults never escape a batch call
            if self.resilience is None:
                self.stats.fault(op, error)
            return [False] * len(keys)

    def _timed(self, op: str, count: int, run: Callable[[], list[bool]], page_bytes: int) -> list[bool]:
        begin = time.perf_counter()
        results = run()
        ok = sum(results)
        self.stats.record(op, pages=count, ok=ok, nbytes=ok * page_bytes, seconds=time.perf_counter() - begin)
        return results

    def _exists_in(self, entry: RegisteredPool, keys: list[str], context: BatchContext) -> list[bool]:
        skeys = entry.keyspace.storage_keys_unchecked(keys)
        return self._timed("exists", len(keys), lambda: self._guarded("exists", skeys, None, context, "pages_exist"), 0)

    def _move(
        self, op: str, entry: RegisteredPool, keys: list[str], starts: list[int], context: BatchContext
    ) -> list[bool]:
        """Read (``op="get"``) or write (``"set"``) ``keys`` at slot ``starts`` of ``entry``'s pool."""
        skeys = entry.keyspace.storage_keys_unchecked(keys)
        pages, after_read = entry.pages(starts)
        primitive = "read_pages" if op == "get" else "write_pages"
        results = self._timed(
            op, len(keys), lambda: self._guarded(op, skeys, pages, context, primitive), entry.keyspace.page_bytes
        )
        if after_read is not None and op == "get":
            after_read(results)
        elif op == "set" and self._hc_manifests is not None and any(results):
            self._hc_manifests.after_write(self, entry.keyspace, context)
        return results

    # ------------------------------------------------------------ SGLang v1
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Read KV pages straight into host-pool slots; one bool per key (``False`` = miss)."""
        entry = self._require_bytes(self._require_ready())
        keys = validate_keys(keys)
        starts = entry.page_starts(len(keys), host_indices)
        if not keys:
            return []
        return self._move("get", entry, keys, starts, self._context(entry, extra_info))

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Write KV pages straight from host-pool slots; one bool per key (``True`` = stored)."""
        entry = self._require_bytes(self._require_ready())
        keys = validate_keys(keys)
        starts = entry.page_starts(len(keys), host_indices)
        if not keys:
            return []
        return self._move("set", entry, keys, starts, self._context(entry, extra_info))

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
            if not _takes_context(type(self).clear_pages, 0):
                self.clear_pages()  # type: ignore[call-arg]  # written before clear_pages took prefixes
            elif prefixes is None or prefixes:
                self.clear_pages(sorted(set(prefixes)) if prefixes is not None else None)
        except Exception as error:
            self.stats.fault("clear", error)

    def get_stats(self) -> dict[str, Any]:
        """Counters per operation, named counters, fault totals and resilience state."""
        snapshot = self.stats.snapshot()
        snapshot["backend"] = type(self).__name__
        snapshot["resilience"] = self.resilience.snapshot() if self.resilience else None
        return snapshot

    def close(self) -> None:
        """Release resources; idempotent. Later storage calls raise :class:`InvalidRequestError`."""
        with self._hc_close_lock:
            if self._hc_closed:
                return
            self._hc_closed = True
        self.release()

    @classmethod
    def options_from_config(cls, config: HiCacheStorageConfig) -> tuple[Any, float]:
        """(parsed ``Options``, I/O timeout) an instance built from ``config`` would use, without building one.

        For tools that talk to the same service with the backend's settings (e.g. a raw baseline).
        The timeout is the one :attr:`io_timeout_s` gives; bad options raise :class:`ConfigError`.
        """
        extra = dict(config.extra_config or {})
        options = parse_options(cls.Options, {k: v for k, v in extra.items() if k not in SDK_OPTION_NAMES})
        resilience = ResilienceOptions.from_config(extra.get("resilience"))
        return options, resilience.deadline_s if resilience is not None else cls.DEFAULT_IO_TIMEOUT_S

    @property
    def io_timeout_s(self) -> float:
        """The timeout (seconds) a backend should give its client for one I/O call.

        The resilience deadline (``extra_config.resilience.deadline_s``, default 5 s) when the
        policy is on, else :attr:`DEFAULT_IO_TIMEOUT_S` (5 s). A backend option naming an explicit
        client timeout should take precedence: ``options.timeout_s or self.io_timeout_s``.
        """
        if self.resilience is not None:
            return self.resilience.options.deadline_s
        return self.DEFAULT_IO_TIMEOUT_S

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._hc_closed

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} api_version={self.api_version} closed={self._hc_closed}>"


def _looks_like_config(value: object) -> bool:
    """SGLang passes its own ``HiCacheStorageConfig``: accept anything with the same fields."""
    return all(hasattr(value, name) for name in ("tp_rank", "tp_size", "is_mla_model", "model_name", "extra_config"))
