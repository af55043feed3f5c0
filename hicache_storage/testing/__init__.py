"""Test kit for backend authors: small seeded host pools, page indices, keys, test servers.

Everything here is plain Python (no pytest import), so it serves in fixtures, in scripts and in
the tests themselves::

    from hicache_storage.testing import make_pool, page_bytes, page_indices, random_keys

    pool = make_pool()                        # 16 pages of 4 tokens, seeded random bytes
    keys = random_keys(4)                     # 4 fresh page-hash-like keys
    written = [page_bytes(pool, p) for p in range(4)]
    assert backend.batch_set_v1(keys, page_indices(0, 4)) == [True] * 4
    assert backend.batch_get_v1(keys, page_indices(4, 4)) == [True] * 4
    assert [page_bytes(pool, p) for p in range(4, 8)] == written

In a source checkout, :class:`TestServices` (:mod:`~hicache_storage.testing.services`) reads the
connection settings of the local test servers (``scripts/services/env.sh --json``) and starts or
stops them. :mod:`~hicache_storage.testing.s3_server` (imported only when asked for; it needs
pytest) is a private authenticating S3 server and the credential test class of S3 backends.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..config import make_config
from ..contract import HiCacheStorage
from ..host_pool import HostKVPool
from ..keys import KeySpace
from ..layers.stack import LayerFactory
from ..plugin.backend import Backend
from ..pools import BatchContext, HostStatePool, pool_facts, pool_name_str
from ..pools.buffers import pool_page_buffers
from ..registry import import_object, load_backend
from ..store_admin import manifest_key
from .services import TestServices, s3_backend_options, s3_client

__all__ = [
    "FAST_RESILIENCE",
    "check_outage_and_recovery",
    "check_raw_client",
    "PAGE_SIZE",
    "attach_hybrid_pools",
    "make_hybrid_pools",
    "import_object",
    "make_state_pool",
    "manifest_key",
    "plain_context",
    "pool_facts",
    "pool_name_str",
    "pool_page_buffers",
    "TestServices",
    "close_backends",
    "make_backend",
    "make_pool",
    "page_bytes",
    "page_indices",
    "random_keys",
    "s3_backend_options",
    "s3_client",
]

#: Tokens per page of the pools :func:`make_pool` builds unless told otherwise.
PAGE_SIZE = 4

#: ``extra_config["resilience"]`` for fault tests: 1 s deadline, one quick retry, fast breaker reset.
FAST_RESILIENCE: dict[str, float] = {
    "deadline_s": 1.0,
    "retries": 1,
    "backoff_s": 0.001,
    "backoff_max_s": 0.01,
    "breaker_reset_s": 0.05,
}


# --------------------------------------------------------------------------- pools and pages
def make_pool(
    layout: str = "page_first",
    is_mla: bool = False,
    num_pages: int = 16,
    *,
    page_size: int = PAGE_SIZE,
    dtype: str = "bfloat16",
    layer_num: int = 3,
    head_num: int = 2,
    head_dim: int = 8,
    kv_cache_dim: int = 24,
    seed: int | None = 3,
) -> HostKVPool:
    """A small :class:`HostKVPool` filled with random bytes drawn from ``torch`` seeded with ``seed``.

    The same arguments give the same bytes. ``seed=None`` leaves the pool zero-filled.
    MHA pools use ``head_num``/``head_dim``, MLA pools (``is_mla``) ``kv_cache_dim``.
    """
    pool = HostKVPool(
        num_pages=num_pages,
        page_size=page_size,
        layer_num=layer_num,
        dtype=dtype,
        layout=layout,
        is_mla=is_mla,
        head_num=head_num,
        head_dim=head_dim,
        kv_cache_dim=kv_cache_dim,
    )
    if seed is not None:
        raw = pool.kv_buffer.view(-1).view(torch.uint8)
        generator = torch.Generator().manual_seed(seed)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=generator))
    return pool


def make_state_pool(num_slots: int = 16, *, layer_num: int = 2, seed: int | None = 5) -> HostStatePool:
    """A small Mamba-style state pool (one slot per node boundary), seeded random bytes unless ``seed`` is None."""
    pool = HostStatePool(num_slots=num_slots, layer_num=layer_num, temporal_shape=(2, 8), conv_shapes=((3, 4), (2, 4)))
    if seed is not None:
        pool.fill_random(seed)
    return pool


def make_hybrid_pools(
    layout: str = "page_first", *, num_pages: int = 16, page_size: int = PAGE_SIZE, seed: int = 7
) -> dict[str, Any]:
    """Seeded pools of a hybrid model: ``kv`` (full attention), ``swa`` (sliding-window KV, fewer layers),
    ``indexer`` (a DSA-style per-token sidecar indexed like KV) and ``mamba`` (state slots)."""
    return {
        "kv": make_pool(layout, num_pages=num_pages, page_size=page_size, seed=seed),
        "swa": make_pool(layout, num_pages=num_pages, page_size=page_size, layer_num=1, head_dim=8, seed=seed + 1),
        "indexer": make_pool(
            layout, True, num_pages=num_pages, page_size=page_size, layer_num=1, kv_cache_dim=8, seed=seed + 2
        ),
        "mamba": make_state_pool(num_pages, seed=seed + 3),
    }


def attach_hybrid_pools(backend: HiCacheStorage, pools: Mapping[str, Any]) -> None:
    """Register ``pools`` (from :func:`make_hybrid_pools`) the way SGLang's hybrid controller does."""
    backend.register_mem_pool_host(pools["kv"])
    for name, pool in pools.items():
        if name != "kv":
            backend.register_mem_host_pool_v2(pool, name)
    backend.on_host_pools_registered()


def plain_context(page_bytes: int, pool: str = "kv") -> BatchContext:
    """A :class:`BatchContext` for calling primitives directly, before any host pool is attached."""
    space = KeySpace(
        model_name="test", dtype="uint8", layout="page_first", page_size=1, page_bytes=page_bytes, is_mla=False
    )
    return BatchContext(pool=pool, keyspace=space)


def page_indices(first_page: int, count: int, page_size: int = PAGE_SIZE) -> torch.Tensor:
    """Token indices (int64) of the ``count`` pages from page ``first_page`` on: what the v1 calls take."""
    return torch.arange(first_page * page_size, (first_page + count) * page_size, dtype=torch.int64)


def page_bytes(pool: Any, page: int) -> bytes:
    """The bytes of page number ``page`` of ``pool`` (ours or SGLang's), in page byte order."""
    data: torch.Tensor = pool.get_data_page(page * pool.page_size)
    return bytes(data.contiguous().view(torch.uint8).numpy())


def random_keys(count: int, salt: str | None = None) -> list[str]:
    """``count`` distinct page-hash-like keys (SHA-256 hex, 64 characters).

    Fresh keys on every call; the same ``salt`` gives the same keys (``sha256(salt + str(i))``).
    """
    prefix = secrets.token_hex(4) if salt is None else salt
    return [hashlib.sha256(f"{prefix}{i}".encode()).hexdigest() for i in range(count)]


# --------------------------------------------------------------------------- backends
def make_backend(
    backend: type[Backend[Any]] | str,
    extra_config: Mapping[str, Any],
    pool: HostKVPool | None = None,
    *,
    model: str = "m",
    layers: Sequence[LayerFactory] = (),
) -> HiCacheStorage:
    """Storage over ``backend`` (a class or registered name) built from ``make_config(model, extra_config=...)``,
    with ``pool`` (else :func:`make_pool`) registered."""
    storage = load_backend(backend, make_config(model, extra_config=dict(extra_config)), layers=layers)
    storage.register_mem_pool_host(pool if pool is not None else make_pool())
    return storage


def close_backends(backends: Iterable[HiCacheStorage]) -> None:
    """Clear and close each backend not closed yet (the teardown of a test that opened them)."""
    for backend in backends:
        if not backend.closed:
            backend.clear()
            backend.close()


def check_raw_client(raw: Any, count: int = 5, page_bytes: int = 4096) -> tuple[list[str], list[bytes]]:
    """Exercise a ``raw_baseline`` client: set, exists, get byte-exact, and a wrong-size get is a miss.

    The last page is a non-byte memoryview (uint16, 2-D), which the client must cast, not reject.
    Returns the keys written and their bytes, for the caller's side-channel checks and ``close()``.
    """
    keys = [secrets.token_hex(8) for _ in range(count)]
    data: list[memoryview] = [memoryview(bytearray(os.urandom(page_bytes))) for _ in range(count - 1)]
    data.append(np.arange(page_bytes // 2, dtype=np.uint16).reshape(2, -1).data)
    assert raw.set(keys, data) == [True] * count
    assert raw.exists([*keys, "absent"]) == [True] * count + [False]
    out = [memoryview(bytearray(page_bytes)) for _ in range(count)] + [memoryview(bytearray(10))]
    assert raw.get([*keys, "absent"], out) == [True] * count + [False]
    expected = [bytes(view) for view in data]
    assert [bytes(view) for view in out[:count]] == expected
    assert raw.get(keys[:1], [memoryview(bytearray(100))]) == [False]  # wrong size: a miss
    return keys, expected


# --------------------------------------------------------------------------- test servers
def check_outage_and_recovery(
    backend: HiCacheStorage,
    stop: Callable[[], object],
    start: Callable[[], object],
    *,
    bound_s: float = 10.0,
    recover_s: float = 20.0,
) -> None:
    """Store 2 pages, ``stop`` the server, check every batch call degrades, ``start`` it, check recovery.

    While the server is down, exists/get/set must return misses or ``False`` (never raise) within
    ``bound_s`` seconds in all; after ``start`` the backend must store and read pages again within
    ``recover_s``. Needs a registered pool with at least 8 pages. Raises ``AssertionError`` otherwise.
    """
    keys = random_keys(4)
    assert backend.batch_set_v1(keys[:2], page_indices(0, 2)) == [True, True]
    stop()
    try:
        begin = time.monotonic()
        assert backend.batch_exists_each(keys) == [False] * 4
        assert backend.batch_get_v1(keys[:2], page_indices(4, 2)) == [False, False]
        assert backend.batch_set_v1(keys[2:], page_indices(2, 2)) == [False, False]
        elapsed = time.monotonic() - begin
        assert elapsed < bound_s, f"calls with the server down took {elapsed:.1f} s (bound {bound_s} s)"
    finally:
        start()
    deadline = time.monotonic() + recover_s
    while backend.batch_set_v1(keys[2:], page_indices(2, 2)) != [True, True]:
        assert time.monotonic() < deadline, "backend did not recover after the restart"
        time.sleep(0.1)
    assert backend.batch_get_v1(keys[2:], page_indices(6, 2)) == [True, True]
