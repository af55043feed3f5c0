"""SGLang 0.5.23's own cache-controller code, runnable on a CPU-only machine.

``sglang.srt.managers.cache_controller`` and ``...hybrid_cache.hybrid_cache_controller`` import the
whole server at module level (layers, kernels, ``transformers``, ``tvm_ffi`` ...), and building a
controller needs CUDA streams and process groups. The storage tier only sees a handful of their
methods, so those methods, and the operation classes they use, are compiled here from the
released wheel's own source files (located through the installed package, parsed with ``ast``,
compiled under their real file names and line numbers) into two small classes:

- :class:`HiCacheController`: ``HiCacheController``'s storage methods of ``cache_controller.py``;
- :class:`HybridCacheController`: ``HybridCacheController``'s of ``hybrid_cache_controller.py``,
  subclassing the first, so its ``super()`` calls reach SGLang's base methods as in SGLang;
- :func:`load_radix_key`: ``RadixKey`` of ``radix_cache.py`` (tokens with ``extra_key``/``cache_salt``).

Their globals are SGLang's own objects from modules that do import on CPU (``PoolTransfer``,
``PoolTransferResult``, ``count_pool_hits``, ``STORAGE_BATCH_SIZE``, ``get_storage_hash_str`` ...).
:func:`make_controller` gives an instance with the attributes those methods read (what SGLang's
``__init__`` and ``attach_storage_backend`` set), for one storage backend and one set of host pools.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import logging
import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from types import SimpleNamespace
from typing import Any

import torch

CACHE_CONTROLLER = "sglang.srt.managers.cache_controller"
HYBRID_CONTROLLER = "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller"
RADIX_CACHE = "sglang.srt.mem_cache.radix_cache"

#: What is taken from each file: top-level definitions, and methods of the controller class.
BASE_TOP_LEVEL = ("PrefetchAck", "StorageOperation", "storage_model_name")
BASE_METHODS = (
    "backup_skip",
    "_all_reduce",
    "_page_get_zero_copy",
    "_generic_page_get",
    "_page_transfer",
    "_page_transfer_kv_batch",
    "_storage_hit_query",
    "_sync_prefetch_hit_query",
    "_generic_page_set",
    "_page_set_zero_copy",
    "_page_backup",
    "_page_backup_or_log",
    "write_storage",
    "_generate_storage_config",
)
HYBRID_TOP_LEVEL = ("_NO_POOL_VERDICT", "_trailing_chain_groups", "StorageOperation", "PrefetchOperation")
HYBRID_METHODS = (
    "_storage_hit_query",
    "_sync_prefetch_hit_query",
    "_page_transfer",
    "_page_transfer_with_stable_layout",
    "_page_transfer_sidecar",
    "_page_backup",
    "_page_backup_with_stable_layout",
    "should_backup",
    "_resolve_sidecar_kv_derived_pool_transfers",
    "_resolve_sidecar_nonkv_derived_pool_transfers",
    "_sync_trailing_keys",
    "append_host_mem_release",
    "_append_host_mem_release_pages",
    "write_storage",
)

#: Backends SGLang's attach moves with the zero-copy v1 calls (``attach_storage_backend``).
ZERO_COPY_BACKENDS = ("hf3fs", "mooncake", "npu_memcache", "eic", "nixl", "simm", "mori", "tensorcast", "seaweedfs")


def source_path(module: str) -> Path:
    """The installed source file of ``module`` (found without importing it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ImportError(f"{module} is not installed")
    return Path(spec.origin)


def _pick(
    tree: ast.Module, top_level: tuple[str, ...], class_name: str | None, methods: tuple[str, ...]
) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """The named top-level definitions (in file order) and the named methods of ``class_name``."""
    found: dict[str, ast.stmt] = {}
    chosen: list[ast.stmt] = []
    body: list[ast.stmt] | None = None
    for node in tree.body:
        names = _defined_names(node)
        if any(name in top_level for name in names):
            chosen.append(node)
            found.update(dict.fromkeys(names, node))
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            members = {item.name: item for item in node.body if isinstance(item, ast.FunctionDef)}
            missing = [name for name in methods if name not in members]
            if missing:
                raise LookupError(f"{class_name} has no {missing}: SGLang changed; update this list")
            body = [members[name] for name in methods]
    if body is None and class_name is not None:
        raise LookupError(f"no class {class_name} in its source file: SGLang changed")
    missing_top = [name for name in top_level if name not in found]
    if missing_top:
        raise LookupError(f"no top-level {missing_top} in its source file: SGLang changed")
    return chosen, body or []


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [target.id for target in node.targets if isinstance(target, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _compile(
    module: str,
    class_name: str | None,
    *,
    top_level: tuple[str, ...],
    methods: tuple[str, ...],
    base: str | None,
    namespace: dict[str, Any],
) -> dict[str, Any]:
    path = source_path(module)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    chosen, body = _pick(tree, top_level, class_name, methods)
    if class_name is not None:
        cls = ast.ClassDef(
            name=class_name,
            bases=[ast.Name(id=base, ctx=ast.Load())] if base else [],
            keywords=[],
            body=body,
            decorator_list=[],
        )
        if "type_params" in ast.ClassDef._fields:  # Python 3.12+
            setattr(cls, "type_params", [])  # noqa: B010 - the field is absent from older ast stubs
        chosen.append(cls)
    future = ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)
    built = ast.Module(body=[future, *chosen], type_ignores=[])
    ast.fix_missing_locations(built)
    # A module of its own (dataclasses look their class's module up), named apart from SGLang's.
    compiled = types.ModuleType(f"{__name__}.{module.rsplit('.', 1)[-1]}")
    compiled.__file__ = str(path)
    compiled.__dict__.update(namespace)
    sys.modules[compiled.__name__] = compiled
    exec(compile(built, str(path), "exec"), compiled.__dict__)  # SGLang's own source, from its wheel
    return compiled.__dict__


@dataclass
class Controllers:
    """The compiled classes, and the namespaces their methods run in."""

    base: type[Any]
    hybrid: type[Any]
    base_namespace: dict[str, Any] = field(repr=False)
    hybrid_namespace: dict[str, Any] = field(repr=False)

    @property
    def PrefetchOperation(self) -> type[Any]:  # SGLang's class name
        """SGLang's hybrid ``PrefetchOperation``."""
        return self.hybrid_namespace["PrefetchOperation"]  # type: ignore[no-any-return]

    @property
    def StorageOperation(self) -> type[Any]:  # SGLang's class name
        """SGLang's hybrid ``StorageOperation`` (carries ``pool_transfers``)."""
        return self.hybrid_namespace["StorageOperation"]  # type: ignore[no-any-return]


def load_controllers() -> Controllers:
    """Compile SGLang's controller methods (raises if SGLang's storage modules do not import)."""
    from sglang.srt.mem_cache import hicache_storage as storage
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    shared: dict[str, Any] = {
        "torch": torch,
        "logging": logging,
        "threading": threading,
        "time": time,
        "dataclass": dataclass,
        "field": field,
        "Queue": Queue,
        "Empty": Empty,
        "STORAGE_BATCH_SIZE": storage.STORAGE_BATCH_SIZE,
        "HiCacheStorageConfig": storage.HiCacheStorageConfig,
        "HiCacheStorageExtraInfo": storage.HiCacheStorageExtraInfo,
        "PoolHitPolicy": storage.PoolHitPolicy,
        "PoolName": storage.PoolName,
        "PoolTransfer": storage.PoolTransfer,
        "PoolTransferResult": storage.PoolTransferResult,
        "count_pool_hits": storage.count_pool_hits,
        "get_storage_hash_str": get_storage_hash_str,
    }
    base_ns = _compile(
        CACHE_CONTROLLER,
        "HiCacheController",
        top_level=BASE_TOP_LEVEL,
        methods=BASE_METHODS,
        base=None,
        namespace={**shared, "logger": logging.getLogger(CACHE_CONTROLLER)},
    )

    class MHATokenToKVPoolHost:
        """Stand-in for SGLang's MHA host pool class (``should_backup`` checks it for mooncake only)."""

    hybrid_ns = _compile(
        HYBRID_CONTROLLER,
        "HybridCacheController",
        top_level=HYBRID_TOP_LEVEL,
        methods=HYBRID_METHODS,
        base="BaseHiCacheController",
        namespace={
            **shared,
            "logger": logging.getLogger(HYBRID_CONTROLLER),
            "BaseHiCacheController": base_ns["HiCacheController"],
            "BaseStorageOperation": base_ns["StorageOperation"],
            "PrefetchAck": base_ns["PrefetchAck"],
            "MHATokenToKVPoolHost": MHATokenToKVPoolHost,
        },
    )
    return Controllers(base_ns["HiCacheController"], hybrid_ns["HybridCacheController"], base_ns, hybrid_ns)


def load_radix_key() -> type[Any]:
    """SGLang's ``RadixKey`` (``mem_cache/radix_cache.py``): a request's tokens with ``extra_key``/``cache_salt``.

    Compiled from its source like the controllers (``radix_cache`` imports the scheduler's types).
    """
    from array import array

    namespace = _compile(
        RADIX_CACHE, None, top_level=("RadixKey",), methods=(), base=None, namespace={"array": array, "torch": torch}
    )
    return namespace["RadixKey"]  # type: ignore[no-any-return]


class HostPoolGroup:
    """Stand-in for SGLang's ``HostPoolGroup``: the anchor (KV) entry and one entry per sidecar pool."""

    def __init__(self, pools: Mapping[Any, Any], kv_name: Any) -> None:
        self.entries = [
            SimpleNamespace(name=name, host_pool=pool, is_primary_index_anchor=name == kv_name)
            for name, pool in pools.items()
        ]
        self.entry_map = {entry.name: entry for entry in self.entries}
        self.anchor_entry = self.entry_map[kv_name]
        self.page_size = self.anchor_entry.host_pool.page_size

    @contextlib.contextmanager
    def layout_lease(self) -> Iterator[None]:
        """SGLang pins the host layout during a transfer; these pools never change layout."""
        yield


def make_controller(
    controllers: Controllers,
    backend: Any,
    backend_type: str,
    pools: Mapping[Any, Any],
    storage_config: Any,
    *,
    hybrid: bool = True,
) -> Any:
    """A controller over ``backend`` (already built by SGLang's factory) and ``pools`` (name -> host pool).

    Attaches the backend the way SGLang's ``HybridCacheController.attach_storage_backend`` does:
    ``register_mem_pool_host(anchor)``, ``register_mem_host_pool_v2`` for every entry (the anchor
    included), then ``on_host_pools_registered()``; and picks the page functions as SGLang's base
    attach does (zero-copy for its zero-copy backends and for ``dynamic`` with ``interface_v1``).
    """
    from sglang.srt.mem_cache.hicache_storage import PoolName

    cls = controllers.hybrid if hybrid else controllers.base
    self = object.__new__(cls)
    group = HostPoolGroup(pools, PoolName.KV)
    self.mem_pool_host = group
    self.storage_host_pool = group.anchor_entry.host_pool
    self.page_size = group.page_size
    self.storage_backend = backend
    self.storage_backend_type = backend_type
    self.storage_config = storage_config
    self.prefetch_sync_queue = Queue()
    self.backup_queue = Queue()
    self.host_mem_release_queue = Queue()
    self.extra_host_mem_release_queues = {
        entry.name: Queue() for entry in group.entries if not entry.is_primary_index_anchor
    }
    self.prefetch_hits_sync_groups = []
    self.prefetch_completion_sync_groups = []
    backend.register_mem_pool_host(self.storage_host_pool)
    if hybrid:
        for entry in group.entries:
            backend.register_mem_host_pool_v2(entry.host_pool, entry.name)
    backend.on_host_pools_registered()
    zero_copy = backend_type in ZERO_COPY_BACKENDS or (
        backend_type == "dynamic" and bool((storage_config.extra_config or {}).get("interface_v1", 0))
    )
    self.page_get_func = self._page_get_zero_copy if zero_copy else self._generic_page_get
    self.page_set_func = self._page_set_zero_copy if zero_copy else self._generic_page_set
    return self


def drain(queue: Queue[Any]) -> list[Any]:
    """Everything queued so far (the acks a controller put on its prefetch sync queue)."""
    items = []
    while True:
        try:
            items.append(queue.get_nowait())
        except Empty:
            return items
