"""The call machinery under the caller API: pool registration, guarded chunked primitive calls, statistics.

:class:`StorageCore` validates nothing a caller passes (the caller API in :mod:`hicache_storage.contract`
does); it owns the registered pools and their key spaces, runs primitives over chunks of
``max_batch_size`` under the resilience policy (a fault becomes ``False`` and is counted), times
each call, and closes once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .batch_context import KV_POOL, BatchContext
from .config import SDK_OPTION_NAMES, HiCacheStorageConfig
from .errors import ConfigError, InvalidRequestError
from .keys import KeySpace, validate_key
from .options import parse_options
from .page_buffers import pool_page_bytes
from .plugin.primitives import OptionsT, Primitive, StoragePrimitives, takes_context
from .pool_registry import PoolRegistry, RegisteredPool, pool_keyspace
from .pools import pool_name_str
from .resilience import ResilienceOptions, ResiliencePolicy
from .stats import StorageStats
from .store_admin import ManifestKeeper

__all__ = ["StorageCore", "keyspace_for"]

T = TypeVar("T")


def keyspace_for(
    config: HiCacheStorageConfig, pool: Any, *, namespace: str = "", model_revision: str = "", pool_name: str = KV_POOL
) -> KeySpace:
    """The :class:`KeySpace` of ``config`` with host pool ``pool`` (ours or SGLang's) registered as ``pool_name``."""
    return pool_keyspace(config, pool, pool_name=pool_name, namespace=namespace, model_revision=model_revision)



class StorageCore(StoragePrimitives[OptionsT]):
    """Pools, dispatch, statistics and lifetime of a backend instance (base of the caller API)."""

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
            if takes_context(type(self).on_register_pool, 1):
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
