"""The storage contract: :class:`HiCacheStorage`, call-compatible with SGLang's class of that name.

Callers (an engine, the pipeline, SGLang through the adapter) use the SGLang methods
(``batch_get_v1`` ...) plus ``batch_exists_each``, ``delete`` and ``close``. Backend authors
subclass and implement three primitives, which receive *storage keys* (already mapped through the
:class:`~hicache_storage.keys.KeySpace`) and pages as lists of memoryviews:

- ``write_pages(keys, pages) -> list[bool]``: store each page (the concatenation of its segments);
  a page must become visible to ``pages_exist`` only once it is fully stored.
- ``read_pages(keys, pages) -> list[bool]``: fill each page's segments with the stored bytes;
  ``False`` for a missing page or one whose stored size or checksum is wrong.
- ``pages_exist(keys) -> list[bool]``: one bool per key.

Optional: ``delete_pages``, ``clear_pages``, ``release`` (close resources), ``on_register_pool``.
Everything else is inherited: validation, key mapping, batching to ``max_batch_size``, fault
handling (an exception in a primitive becomes misses / ``False`` and is counted), statistics.
"""

from __future__ import annotations

import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import torch

from .capabilities import Capabilities
from .config import SDK_OPTION_NAMES, HiCacheStorageConfig, HiCacheStorageExtraInfo
from .errors import ConfigError, InvalidRequestError
from .keys import KeySpace, validate_key, validate_keys
from .options import NoOptions, parse_options
from .page_buffers import PageBuffers, pool_page_buffers, pool_page_bytes, tensor_page_buffer
from .resilience import ResilienceOptions, ResiliencePolicy
from .stats import StorageStats

__all__ = [
    "API_VERSION",
    "Capabilities",
    "HiCacheStorage",
    "HiCacheStorageConfig",
    "HiCacheStorageExtraInfo",
    "PageBuffers",
    "UnsupportedOperation",
    "keyspace_for",
]

#: Version of this contract ("MAJOR.MINOR"); a plugin must share MAJOR and not exceed MINOR.
API_VERSION = "1.0"

T = TypeVar("T")


class UnsupportedOperation(NotImplementedError):
    """The backend does not declare the capability this call needs (``delete``, ``clear``)."""


def keyspace_for(config: HiCacheStorageConfig, pool: Any, *, namespace: str = "", model_revision: str = "") -> KeySpace:
    """The :class:`KeySpace` of ``config`` with host pool ``pool`` (ours or SGLang's)."""
    dtype = str(getattr(pool, "dtype", "unknown")).removeprefix("torch.")
    is_mla = getattr(pool, "is_mla", None)
    if is_mla is None:
        is_mla = "MLA" in type(pool).__name__
    return KeySpace(
        model_name=config.model_name or "",
        model_revision=model_revision,
        namespace=namespace,
        dtype=dtype,
        layout=str(getattr(pool, "layout", "unknown")),
        page_size=int(pool.page_size),
        page_bytes=pool_page_bytes(pool),
        is_mla=bool(is_mla),
        tp_rank=0 if config.is_mla_model else config.tp_rank,
        tp_size=1 if config.is_mla_model else config.tp_size,
        pp_rank=config.pp_rank,
        pp_size=config.pp_size,
        cp_rank=config.attn_cp_rank,
        cp_size=config.attn_cp_size,
    )


class HiCacheStorage(ABC):
    """Abstract L3 storage backend.

    Construct with a :class:`HiCacheStorageConfig`; backend options come from
    ``config.extra_config`` parsed into the class's ``Options`` dataclass (``self.options``).
    Call ``register_mem_pool_host(pool)`` before any storage call: storage keys depend on the
    pool's dtype, layout and page size.

    Rules every caller may rely on: invalid requests raise a :class:`ValueError` subclass before
    anything is written; batch calls never raise for backend faults and never return ``None``
    (a failed read is a miss, a failed write ``False``, both counted in ``get_stats()``).
    """

    api_version: ClassVar[str] = API_VERSION
    capabilities: ClassVar[Capabilities] = Capabilities()
    Options: ClassVar[type[Any]] = NoOptions
    #: Client I/O timeout (seconds) of a backend whose resilience policy is off (see :attr:`io_timeout_s`).
    DEFAULT_IO_TIMEOUT_S: ClassVar[float] = 5.0

    def __init__(self, config: HiCacheStorageConfig) -> None:
        if not isinstance(config, HiCacheStorageConfig) and not _looks_like_config(config):
            raise ConfigError("config", f"expected a HiCacheStorageConfig, got {type(config).__name__}")
        self.config = config
        extra = dict(config.extra_config or {})
        namespace = extra.get("namespace", "")
        if not isinstance(namespace, str):
            raise ConfigError("extra_config.namespace", f"expected a str, got {namespace!r}")
        revision = extra.get("model_revision", "")
        if not isinstance(revision, str):
            raise ConfigError("extra_config.model_revision", f"expected a str, got {revision!r}")
        self.namespace = namespace
        self.model_revision = revision
        backend_values = {k: v for k, v in extra.items() if k not in SDK_OPTION_NAMES}
        self.options = parse_options(self.Options, backend_values)
        self.stats = StorageStats()
        resilience_options = ResilienceOptions.from_config(extra.get("resilience"))
        self.resilience: ResiliencePolicy | None = (
            ResiliencePolicy(resilience_options, self.stats) if resilience_options else None
        )
        self.mem_pool_host: Any = None
        self.keyspace: KeySpace | None = None
        self._closed = False
        self._close_lock = threading.Lock()

    # ------------------------------------------------------------ primitives
    @abstractmethod
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        """Store each page under its storage key; ``True`` once the whole page is readable."""

    @abstractmethod
    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        """Fill each page's segments from storage; ``False`` for a miss or a page failing checks."""

    @abstractmethod
    def pages_exist(self, keys: Sequence[str]) -> list[bool]:
        """Whether each storage key holds a complete page."""

    def delete_pages(self, keys: Sequence[str]) -> list[bool]:
        """Remove pages; ``True`` when the key is absent afterwards. Needs ``supports_delete``."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support delete")

    def clear_pages(self) -> None:
        """Remove every page this backend stores under its configured location."""
        raise UnsupportedOperation(f"{type(self).__name__} does not support clear")

    def release(self) -> None:
        """Free connections and other resources (called once by :meth:`close`)."""

    def on_register_pool(self, pool: Any) -> None:
        """Hook for zero-copy backends to register the pool's memory; called once per pool."""

    # ------------------------------------------------------------ set-up
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """Attach the host pool; fixes the key space. Raises :class:`ConfigError` for a page too big."""
        page_bytes = pool_page_bytes(mem_pool_host)
        limit = self.capabilities.max_page_bytes
        if limit is not None and page_bytes > limit:
            raise ConfigError(
                "mem_pool_host", f"pages of {page_bytes} bytes exceed this backend's max_page_bytes={limit}"
            )
        self.mem_pool_host = mem_pool_host
        self.keyspace = keyspace_for(
            self.config, mem_pool_host, namespace=self.namespace, model_revision=self.model_revision
        )
        self.on_register_pool(mem_pool_host)

    def _require_ready(self) -> KeySpace:
        if self._closed:
            raise InvalidRequestError(f"{type(self).__name__} is closed")
        if self.keyspace is None:
            raise InvalidRequestError(
                "register_mem_pool_host(pool) must be called before storage calls: "
                "storage keys depend on the pool's dtype, layout and page size"
            )
        return self.keyspace

    def _page_starts(self, keys: Sequence[str], host_indices: Any) -> list[int]:
        pool = self.mem_pool_host
        page_size = int(pool.page_size)
        if isinstance(host_indices, torch.Tensor):
            flat = host_indices.reshape(-1).to(torch.int64).cpu()
        else:
            try:
                flat = torch.as_tensor(list(host_indices), dtype=torch.int64)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise InvalidRequestError(f"host_indices must be integers: {exc}") from None
        if flat.numel() != len(keys) * page_size:
            raise InvalidRequestError(
                f"host_indices has {flat.numel()} entries; expected len(keys) * page_size = "
                f"{len(keys)} * {page_size} = {len(keys) * page_size}"
            )
        if not keys:
            return []
        pages = flat.view(len(keys), page_size)
        starts = pages[:, 0]
        if page_size > 1 and not torch.equal(pages - starts[:, None], _page_offsets(page_size).expand_as(pages)):
            raise InvalidRequestError("host_indices: each page's token indices must be consecutive")
        size = int(pool.size)
        result: list[int] = starts.tolist()
        if any(start % page_size or not 0 <= start < size for start in result):
            raise InvalidRequestError(
                f"host_indices: every page must start at a multiple of page_size={page_size} "
                f"inside the pool (size {size})"
            )
        return result

    # ------------------------------------------------------------ dispatch
    def _guarded(
        self, op: str, primitive: Callable[[list[str], Any], list[bool]], skeys: list[str], payload: Any
    ) -> list[bool]:
        """Run a primitive over chunks of ``max_batch_size``; faults become ``False``."""
        results: list[bool] = []
        step = max(1, int(self.capabilities.max_batch_size or len(skeys) or 1))
        for begin in range(0, len(skeys), step):
            chunk_keys = skeys[begin : begin + step]
            chunk_payload = payload[begin : begin + step] if payload is not None else None
            results.extend(self._call_chunk(op, primitive, chunk_keys, chunk_payload))
        return results

    def _call_chunk(
        self, op: str, primitive: Callable[[list[str], Any], list[bool]], keys: list[str], payload: Any
    ) -> list[bool]:
        def attempt() -> list[bool]:
            out = primitive(keys, payload)
            if not isinstance(out, list) or len(out) != len(keys):
                self.stats.bump("contract_violations")
                raise TypeError(
                    f"{type(self).__name__}.{primitive.__name__} returned {type(out).__name__} "
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

    def _timed(self, op: str, keys: list[str], run: Callable[[], list[bool]], page_bytes: int) -> list[bool]:
        begin = time.perf_counter()
        results = run()
        ok = sum(results)
        self.stats.record(
            op,
            pages=len(keys),
            ok=ok,
            nbytes=ok * page_bytes,
            seconds=time.perf_counter() - begin,
        )
        return results

    def _exists_storage(self, skeys: list[str]) -> list[bool]:
        return self._guarded("exists", lambda k, _p: self.pages_exist(k), skeys, None)

    def _write_storage(self, skeys: list[str], pages: list[PageBuffers]) -> list[bool]:
        return self._guarded("set", self.write_pages, skeys, pages)

    def _read_storage(self, skeys: list[str], pages: list[PageBuffers]) -> list[bool]:
        return self._guarded("get", self.read_pages, skeys, pages)

    # ------------------------------------------------------------ SGLang v1
    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Read pages straight into host-pool slots; one bool per key (``False`` = miss)."""
        space = self._require_ready()
        keys = validate_keys(keys)
        starts = self._page_starts(keys, host_indices)
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        pages = pool_page_buffers(self.mem_pool_host, starts)
        return self._timed("get", keys, lambda: self._read_storage(skeys, pages), space.page_bytes)

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool]:
        """Write pages straight from host-pool slots; one bool per key (``True`` = stored)."""
        space = self._require_ready()
        keys = validate_keys(keys)
        starts = self._page_starts(keys, host_indices)
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        pages = pool_page_buffers(self.mem_pool_host, starts)
        return self._timed("set", keys, lambda: self._write_storage(skeys, pages), space.page_bytes)

    # ------------------------------------------------------------ existence
    def batch_exists_each(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> list[bool]:
        """Per-key existence: one bool per key, so a partial hit is not mistaken for a miss."""
        space = self._require_ready()
        keys = validate_keys(keys)
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        return self._timed("exists", keys, lambda: self._exists_storage(skeys), 0)

    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """Number of consecutive existing keys from the start of ``keys`` (SGLang semantics)."""
        count = 0
        for hit in self.batch_exists_each(keys, extra_info):
            if not hit:
                break
            count += 1
        return count

    def exists(self, key: str) -> bool:
        """Whether one key is stored."""
        return self.batch_exists_each([validate_key(key)])[0]

    # ------------------------------------------------------------ SGLang v0
    def batch_get(
        self, keys: list[str], target_locations: Any = None, target_sizes: Any = None
    ) -> list[torch.Tensor | None]:
        """Read flat pages; each result is the filled target tensor, or ``None`` for a miss.

        ``target_locations`` (optional) are flat CPU tensors of one page each, filled in place;
        without them, new tensors from the pool's ``get_dummy_flat_data_page()`` are returned.
        """
        space = self._require_ready()
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
        hits = self._timed("get", keys, lambda: self._read_storage(skeys, pages), space.page_bytes)
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
        space = self._require_ready()
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
        return self._timed("set", keys, lambda: self._write_storage(skeys, pages), space.page_bytes)

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        """Write one flat page."""
        return self.batch_set([validate_key(key)], [value])

    # ------------------------------------------------------------ maintenance
    def delete(self, keys: list[str]) -> list[bool]:
        """Remove pages; one bool per key (``True`` = absent afterwards). Needs ``supports_delete``."""
        space = self._require_ready()
        keys = validate_keys(keys)
        if not self.capabilities.supports_delete:
            raise UnsupportedOperation(f"{type(self).__name__} does not declare supports_delete")
        if not keys:
            return []
        skeys = space.storage_keys_unchecked(keys)
        return self._timed(
            "delete", keys, lambda: self._guarded("delete", lambda k, _p: self.delete_pages(k), skeys, None), 0
        )

    def clear(self) -> None:
        """Remove every page under this backend's configured location. Needs ``supports_clear``.

        Faults are counted, not raised; :class:`UnsupportedOperation` if the capability is absent.
        """
        if self._closed:
            raise InvalidRequestError(f"{type(self).__name__} is closed")
        if not self.capabilities.supports_clear:
            raise UnsupportedOperation(f"{type(self).__name__} does not declare supports_clear")
        try:
            self.clear_pages()
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
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
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
        return self._closed

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} api_version={self.api_version} closed={self._closed}>"


@functools.lru_cache(maxsize=8)
def _page_offsets(page_size: int) -> torch.Tensor:
    """``0 .. page_size-1`` (cached: a process uses a handful of page sizes)."""
    return torch.arange(page_size, dtype=torch.int64)


def _looks_like_config(value: object) -> bool:
    """SGLang passes its own ``HiCacheStorageConfig``: accept anything with the same fields."""
    return all(hasattr(value, name) for name in ("tp_rank", "tp_size", "is_mla_model", "model_name", "extra_config"))
