"""Run any hicache-storage backend inside SGLang through its ``dynamic`` storage backend.

Launch SGLang with::

    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "hicache_storage",
        "module_path": "hicache_storage.integrations.sglang", "class_name": "SGLangBackend",
        "interface_v1": 1, "backend": "file", "path": "/var/cache/hicache"}'

``backend`` names the SDK backend (an entry point such as ``file``, or ``module:Class``); the other
keys of the dict are that backend's options, plus the SDK's own (``namespace``, ``resilience`` ...).
:func:`extra_config_for` and :func:`launch_args` build these values.

SGLang's loader requires a subclass of its own ``HiCacheStorage``: when ``sglang`` is importable,
:class:`SGLangBackend` subclasses it; otherwise it is a plain class with the same surface (for
tests and tools). Batch calls never raise: SGLang's prefetch and backup threads die on any
exception, so every error becomes a miss / ``False`` / ``0`` and is counted in :meth:`sdk_stats`.

Hybrid models (SWA window KV, Mamba state, a DSA indexer, ...) use SGLang's multi-pool calls:
sidecar pools arrive through ``register_mem_host_pool_v2`` and are served through the contract's
``batch_exists_v2`` / ``batch_get_v2`` / ``batch_set_v2``, with results in SGLang's own types and
keyed by SGLang's own pool names.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import MISSING, fields, is_dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from ..config import HiCacheStorageConfig
from ..contract import HiCacheStorage
from ..errors import ConfigError
from ..pools import PoolName, PoolTransferResult, pool_name_str
from ..preflight import check_config
from ..registry import load_backend
from .prometheus import exporters_for

__all__ = ["LOADER_KEYS", "SGLangBackend", "extra_config_for", "launch_args", "sdk_config", "sglang_available"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: The keys SGLang's ``dynamic`` loader needs to find :class:`SGLangBackend`.
LOADER_KEYS: dict[str, Any] = {
    "backend_name": "hicache_storage",
    "module_path": __name__,
    "class_name": "SGLangBackend",
    "interface_v1": 1,
}


def _sglang_base() -> type[Any]:
    try:
        from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as SGLangHiCacheStorage
    except Exception:  # sglang absent or not importable here: a plain base class
        return object
    return SGLangHiCacheStorage  # type: ignore[no-any-return]


if TYPE_CHECKING:
    _Base = object
else:
    _Base = _sglang_base()


def sglang_available() -> bool:
    """Whether :class:`SGLangBackend` subclasses SGLang's ``HiCacheStorage`` in this process."""
    return _Base is not object


@lru_cache(maxsize=1)
def _storage_metrics_class() -> type[Any] | None:
    """SGLang's ``StorageMetrics`` (what its metrics collector expects from ``get_stats``), if importable."""
    try:
        from sglang.srt.observability.metrics_collector import StorageMetrics
    except Exception:
        return None
    return StorageMetrics  # type: ignore[no-any-return]


@lru_cache(maxsize=1)
def _sglang_pool_types() -> tuple[type[Any], type[Any]]:
    """(``PoolName``, ``PoolTransferResult``): SGLang's when importable, else this SDK's look-alikes."""
    try:
        from sglang.srt.mem_cache.hicache_storage import PoolName as EnginePoolName
        from sglang.srt.mem_cache.hicache_storage import PoolTransferResult as EngineResult
    except Exception:
        return PoolName, PoolTransferResult
    return EnginePoolName, EngineResult


def extra_config_for(backend: str, **options: Any) -> dict[str, Any]:
    """The ``--hicache-storage-backend-extra-config`` dict running SDK backend ``backend`` with ``options``.

    The options are checked as the backend will check them (names, types, ranges), without opening
    the store: a typo raises :class:`~hicache_storage.ConfigError` here, not when SGLang starts; an
    unknown backend raises :class:`~hicache_storage.BackendLoadError`.
    """
    check_config(backend, options)
    return {**LOADER_KEYS, "backend": backend, **options}


def launch_args(backend: str, **options: Any) -> list[str]:
    """SGLang command-line arguments that run SDK backend ``backend`` with ``options``."""
    return [
        "--enable-hierarchical-cache",
        "--hicache-storage-backend",
        "dynamic",
        "--hicache-storage-backend-extra-config",
        json.dumps(extra_config_for(backend, **options), separators=(",", ":")),
    ]


def _engine_fields(storage_config: Any) -> dict[str, Any]:
    """Every field of the engine's config: a dataclass's fields, else the object's attributes."""
    if is_dataclass(storage_config) and not isinstance(storage_config, type):
        return {item.name: getattr(storage_config, item.name) for item in fields(storage_config)}
    try:
        return {name: value for name, value in vars(storage_config).items() if not name.startswith("_")}
    except TypeError:  # no __dict__ (slots): only the fields read by name below
        return {}


def sdk_config(storage_config: Any) -> HiCacheStorageConfig:
    """Our :class:`HiCacheStorageConfig` from SGLang's (same fields; older SGLang lacks a few).

    Fields of the engine's config this SDK does not know (a newer SGLang's ``model_identity_hash``,
    ...) go into ``identity_fields``, so they enter every storage key.
    """
    if isinstance(storage_config, HiCacheStorageConfig):
        return storage_config
    known = {field.name for field in fields(HiCacheStorageConfig)}
    identity = dict(getattr(storage_config, "identity_fields", None) or {})
    identity.update({name: value for name, value in _engine_fields(storage_config).items() if name not in known})
    values: dict[str, Any] = {"identity_fields": identity}
    for field in fields(HiCacheStorageConfig):
        if field.name == "identity_fields":
            continue
        if hasattr(storage_config, field.name):
            values[field.name] = getattr(storage_config, field.name)
        elif field.default is MISSING:
            raise ConfigError(f"storage_config.{field.name}", "missing from the engine's storage config")
    values["extra_config"] = dict(values.get("extra_config") or {})
    if int(values.get("dcp_size") or 1) > 1:
        raise ConfigError(
            "storage_config.dcp_size",
            f"decode context parallelism (dcp_size={values['dcp_size']}) is not supported by this adapter",
        )
    return HiCacheStorageConfig(**values)


def _count(keys: Any) -> int:
    try:
        return len(keys)
    except Exception:
        return 0


def _missed(transfers: Sequence[Any]) -> dict[Any, list[bool]]:
    """All-``False`` results for ``transfers``, keyed by their names (never raises)."""
    results: dict[Any, list[bool]] = {}
    for transfer in transfers:
        try:
            name = transfer.name
            results[name] = results.get(name, []) + [False] * _count(getattr(transfer, "keys", None) or [])
        except Exception:  # no name, or one that cannot key a dict: nothing to report it under
            continue
    return results


def _checked(results: Any) -> dict[Any, list[bool]]:
    """A v2 answer as a dict of bool lists; anything else raises (and is counted as the call's error)."""
    if not isinstance(results, dict):
        raise TypeError(f"a v2 transfer returned {type(results).__name__}, not a dict of bool lists")
    return {name: [flag is True for flag in flags] for name, flags in results.items()}


#: Counter prefix of the calls this adapter answered with a miss because they raised (``adapter_errors.<call>``).
ERROR_COUNTER = "adapter_errors."
#: Calls kept per operation between two ``get_stats()`` calls for SGLang's ``StorageMetrics``.
_MAX_SAMPLES = 4096


class SGLangBackend(_Base):
    """An SDK backend (chosen by ``extra_config["backend"]``) behind SGLang's storage interface.

    Built by SGLang as ``SGLangBackend(storage_config, kwargs)``; the host pool arrives later
    through :meth:`register_mem_pool_host`. ``self.backend`` is the SDK's caller instance
    (:class:`~hicache_storage.HiCacheStorage`), loaded through the registry with the resilience
    policy of ``extra_config["resilience"]``. Backend faults are already misses there; what this
    adapter adds is that nothing else raises into SGLang either (a malformed request, a bug):
    such a call is counted in the same statistics (``adapter_errors.<call>``) and logged.
    """

    def __init__(self, storage_config: Any, kwargs: dict[str, Any] | None = None) -> None:
        config = sdk_config(storage_config)
        name = (config.extra_config or {}).get("backend")
        if not isinstance(name, str) or not name:
            raise ConfigError(
                "extra_config.backend",
                "name the hicache-storage backend to run: an entry point such as 'file' or 'sim', or 'module:Class'",
            )
        self.storage_config = storage_config
        self.config = config
        self.backend_name = name
        self.backend: HiCacheStorage = load_backend(name, config)
        self.mem_pool_host: Any = None
        self._pools_registered = False
        if getattr(storage_config, "enable_storage_metrics", False):
            self.backend.stats.keep_samples(_MAX_SAMPLES)
        #: What to run on close: the last write of each metrics exporter ``extra_config`` asks for.
        self._exporters = exporters_for(self.backend, dict(config.extra_config or {}), int(config.tp_rank))

    # ------------------------------------------------------------ guards
    def _guard(self, op: str, fallback: T, call: Callable[[], T]) -> T:
        """Run ``call``; any exception becomes ``fallback`` and is counted (never reaches SGLang)."""
        try:
            return call()
        except Exception as error:
            self._count_error(op, error)
            return fallback

    def _count_error(self, op: str, error: BaseException) -> None:
        stats = self.backend.stats
        stats.bump(ERROR_COUNTER + op)
        message = f"{op}: {type(error).__name__}: {error}"
        stats.note(message)
        count = int(stats.get(ERROR_COUNTER + op))
        if count & (count - 1) == 0:  # log the 1st, 2nd, 4th, 8th ... error of each call
            logger.warning("hicache-storage %s failed (%d so far): %s", op, count, message[:500])

    # ------------------------------------------------------------ set-up
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Attach SGLang's host pool; a pool the backend cannot serve raises here, at start-up."""
        self.backend.register_mem_pool_host(mem_pool_host)
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """Attach a sidecar host pool (SGLang's ``PoolName`` or a str) of a hybrid model.

        During SGLang's attach (before :meth:`on_host_pools_registered`) a pool the backend cannot
        serve raises :class:`ConfigError`, which fails the attach at start-up. A sidecar SGLang
        adds later, while requests run, never raises: the error is counted and logged and the pool
        is not attached (v2 calls naming a pool never attached are counted misses; a pool already
        attached under that name keeps being served).
        """
        if not self._pools_registered:
            self.backend.register_mem_host_pool_v2(host_pool, host_pool_name)
        else:
            op = "register_mem_host_pool_v2"
            self._guard(op, None, lambda: self.backend.register_mem_host_pool_v2(host_pool, host_pool_name))

    def on_host_pools_registered(self) -> None:
        """The pool set of SGLang's attach is complete; v2 calls are served from now on.

        Raises :class:`ConfigError` when the main KV pool was never registered: SGLang then fails
        the attach, as its interface documents, instead of running with a storage tier that
        answers every call with a miss.
        """
        self.backend.on_host_pools_registered()
        self._pools_registered = True

    # ------------------------------------------------------------ zero-copy (v1)
    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Read pages into host-pool slots; one bool per key, never raises."""
        return self._guard(
            "batch_get_v1", [False] * _count(keys), lambda: self.backend.batch_get_v1(keys, host_indices, extra_info)
        )

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        """Write pages from host-pool slots; one bool per key, never raises."""
        return self._guard(
            "batch_set_v1", [False] * _count(keys), lambda: self.backend.batch_set_v1(keys, host_indices, extra_info)
        )

    # ------------------------------------------------------------ generic (v0)
    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """One flat page, or ``None`` for a miss or an error."""
        return self._guard("get", None, lambda: self.backend.get(key, target_location, target_sizes))

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> list[Any]:
        """Flat pages (``None`` per miss); all ``None`` on an error."""
        return self._guard(
            "batch_get", [None] * _count(keys), lambda: self.backend.batch_get(keys, target_locations, target_sizes)
        )

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        """Write one flat page; ``False`` on an error."""
        return self._guard("set", False, lambda: self.backend.set(key, value, target_location, target_sizes))

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        """Write flat pages; ``True`` only if all were stored."""
        return all(self._guard("batch_set", [False] * _count(keys), lambda: self.backend.batch_set_each(keys, values)))

    # ------------------------------------------------------------ existence
    def exists(self, key: str) -> bool:
        """Whether one page is stored; ``False`` on an error."""
        return self._guard("exists", False, lambda: self.backend.exists(key))

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """Leading run of stored pages (SGLang's semantics); ``0`` on an error."""
        return self._guard("batch_exists", 0, lambda: self.backend.batch_exists(keys, extra_info))

    # ------------------------------------------------------------ multi-pool (v2)
    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        """Longest prefix of ``keys`` restorable with KV and every sidecar pool; never raises.

        Returns SGLang's ``PoolTransferResult`` (this SDK's look-alike without SGLang):
        ``kv_hit_pages``, ``extra_pool_hit_pages`` keyed by SGLang's ``PoolName.KV`` and by each
        transfer's own ``name`` object, and ``restorable_prefix_pages``. An error (a malformed
        request, an unregistered pool, a backend fault) is counted and reads as no hit at all.
        """
        _, result_type = _sglang_pool_types()

        def query() -> Any:
            found = self.backend.batch_exists_v2(keys, pool_transfers, extra_info)
            return self._engine_result(found, result_type)

        return self._guard("batch_exists_v2", None, query) or result_type.empty()

    def _engine_result(self, found: Any, result_type: type[Any]) -> Any:
        """``found`` (our :class:`PoolTransferResult`) as SGLang's, keyed by SGLang's pool names."""
        engine_names, _ = _sglang_pool_types()
        kv_name = engine_names(PoolName.KV.value)
        hits: dict[Any, int] = {}
        for name, pages in found.extra_pool_hit_pages.items():
            hits[kv_name if pool_name_str(name) == PoolName.KV.value else name] = int(pages)
        restorable = found.restorable_prefix_pages
        return result_type(
            int(found.kv_hit_pages), hits, None if restorable is None else [int(length) for length in restorable]
        )

    def batch_get_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[Any, list[bool]]:
        """Read each transfer's pages into its pool's host slots; one list of bools per transfer name.

        Keyed by the ``name`` objects SGLang passed; never raises: a malformed transfer fails alone
        (each of its pages a miss, counted), the others still move.
        """
        return self._move_v2("batch_get_v2", self.backend.batch_get_v2, transfers, extra_info)

    def batch_set_v2(self, transfers: list[Any], extra_info: Any = None) -> dict[Any, list[bool]]:
        """Write each transfer's pages from its pool's host slots; one list of bools per transfer name.

        Keyed by the ``name`` objects SGLang passed; never raises: a malformed transfer fails alone
        (each of its pages ``False``, counted), the others still move.
        """
        return self._move_v2("batch_set_v2", self.backend.batch_set_v2, transfers, extra_info)

    def _move_v2(
        self, op: str, call: Callable[..., dict[Any, list[bool]]], transfers: Any, extra_info: Any
    ) -> dict[Any, list[bool]]:
        try:
            items = list(transfers)
        except Exception as error:  # not a list of transfers: nothing to move, nothing to key
            self._count_error(op, error)
            return {}
        results = self._guard(op, None, lambda: _checked(call(items, extra_info, strict=False)))
        missed = _missed(items)
        if results is None:
            return missed
        for name, flags in missed.items():
            results.setdefault(name, flags)
        return results

    # ------------------------------------------------------------ maintenance
    def clear(self) -> bool:
        """Remove every page of the backend's location; ``False`` if unsupported or failed."""

        def run() -> bool:
            self.backend.clear()
            return True

        return self._guard("clear", False, run)

    def close(self) -> None:
        """Close the SDK backend (idempotent; errors are counted, not raised), after a last metrics export."""
        for export in self._exporters:
            self._guard("close", None, export)
        self._guard("close", None, self.backend.close)

    def sdk_stats(self) -> dict[str, Any]:
        """The SDK backend's ``get_stats()``; ``["adapter"]["errors"]`` (call → count) restates its
        ``adapter_errors.<call>`` counters, and ``["adapter"]["last_error"]`` is its ``last_fault``."""
        stats = self.backend.get_stats()
        counters: dict[str, Any] = stats.get("counters", {})
        errors = {name[len(ERROR_COUNTER) :]: int(n) for name, n in counters.items() if name.startswith(ERROR_COUNTER)}
        stats["adapter"] = {"errors": errors, "last_error": stats.get("last_fault") if errors else None}
        return stats

    def get_stats(self) -> Any:
        """SGLang's ``StorageMetrics`` (per-batch page counts and GB/s since the last call).

        Inside SGLang this returns a ``StorageMetrics`` (or ``None`` if that class cannot be
        imported), with the SDK's counters attached as ``.hicache_storage``. Without SGLang it
        returns :meth:`sdk_stats`.
        """
        metrics_cls = _storage_metrics_class()
        if metrics_cls is None:
            return self.sdk_stats() if not sglang_available() else None
        metrics = metrics_cls()
        stats = self.backend.stats
        for op, direction in (("get", "prefetch"), ("set", "backup")):
            for pages, nbytes, seconds in stats.drain_samples(op):
                getattr(metrics, f"{direction}_pgs").append(pages)
                if seconds > 0:
                    getattr(metrics, f"{direction}_bandwidth").append(nbytes / seconds / 1e9)
        metrics.hicache_storage = self.sdk_stats()
        return metrics

    def __repr__(self) -> str:
        return f"<SGLangBackend backend={self.backend_name!r} inner={self.backend!r}>"
