"""Against the released SGLang: ``tp_lcm_size`` as SGLang's controller passes it makes TP2 pages TP4 hits.

SGLang 0.5.23's own ``HiCacheController._generate_storage_config`` (compiled from its source, see
:mod:`sglang_controllers`) pops ``tp_lcm_size`` from ``--hicache-storage-backend-extra-config`` and
sets ``should_split_heads`` for a ``page_head`` host pool; SGLang's ``StorageBackendFactory`` then
loads the adapter, whose pages TP4 (and TP1) ranks of the same model read head by head.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from sglang_controllers import load_controllers

from hicache_storage.integrations.sglang import extra_config_for, sglang_available
from hicache_storage.testing import page_indices
from hicache_storage.testing.cross_tp import expected_heads, fill_rank, global_kv, rank_heads, rank_pool

NO_SGLANG = "sglang is not importable; run scripts/sglang-test.sh (installs sglang==0.5.23, no dependencies)"
if os.environ.get("HICACHE_SGLANG_REQUIRED") and not sglang_available():
    raise RuntimeError("HICACHE_SGLANG_REQUIRED is set, but SGLang's HiCacheStorage cannot be imported")
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not sglang_available(), reason=NO_SGLANG)]

DSV4_POOL = "sglang.srt.mem_cache.deepseek_v4_memory_pool"


class _NotThisPool:
    """Stand-in for the device pool classes SGLang tests with ``isinstance`` (MLA, DeepSeek-V4)."""


@contextmanager
def _dsv4_stand_in() -> Iterator[None]:
    """SGLang's config builder imports DeepSeek-V4's pool module, which needs the full server: a stand-in."""
    saved = sys.modules.get(DSV4_POOL)
    module = types.ModuleType(DSV4_POOL)
    module.DeepSeekV4TokenToKVPool = _NotThisPool  # type: ignore[attr-defined]
    sys.modules[DSV4_POOL] = module
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop(DSV4_POOL, None)
        else:
            sys.modules[DSV4_POOL] = saved


def sglang_config(rank: int, tp_size: int, pool: Any, extra: dict[str, Any]) -> Any:
    """The storage config SGLang's controller builds for tp rank ``rank`` of ``tp_size`` over ``pool``."""
    controllers = load_controllers()
    namespace = controllers.base_namespace
    parallel = SimpleNamespace(tp_rank=rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_dcp_size=1, attn_dcp_rank=0)
    namespace.update(
        get_parallel=lambda: parallel, is_dp_attention_enabled=lambda: False, MLATokenToKVPool=_NotThisPool
    )
    controller = object.__new__(controllers.base)
    controller.mem_pool_device = object()
    controller.mem_pool_host = pool
    controller.storage_host_pool = pool
    controller.enable_storage_metrics = False
    controller.page_size = pool.page_size
    controller.get_attn_cp_rank_and_size = lambda: (0, 1)
    pool.storage_format_tag = None
    with _dsv4_stand_in():
        return controller._generate_storage_config("org/model", dict(extra))


def open_rank(rank: int, tp_size: int, pool: Any, extra: dict[str, Any]) -> tuple[Any, Any]:
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    config = sglang_config(rank, tp_size, pool, extra)
    backend = StorageBackendFactory.create_backend("dynamic", config, pool)
    backend.register_mem_pool_host(pool)
    return config, backend


@pytest.mark.parametrize("reader_layout", ["page_head", "page_first"])
@pytest.mark.parametrize("name", ["file", "sim"])
def test_tp2_pages_are_tp4_and_tp1_hits_through_the_adapter(tmp_path: Path, name: str, reader_layout: str) -> None:
    """SGLang splits only page_head pools (should_split_heads); the SDK splits every layout alike."""
    kv = global_kv(3, heads=8)
    keys = [f"{i:064x}" for i in range(1, 4)]
    options = {"path": str(tmp_path)} if name == "file" else {"store": f"cross-tp-{tmp_path.name}"}
    extra = {**extra_config_for(name, **options), "tp_lcm_size": 4}
    opened = []
    for rank in range(2):
        pool = rank_pool(kv, 2, "page_head")
        config, backend = open_rank(rank, 2, pool, extra)
        opened.append(backend)
        assert config.tp_lcm_size == 4 and config.should_split_heads is True
        assert "tp_lcm_size" not in (config.extra_config or {})  # SGLang popped it
        fill_rank(pool, kv, rank, 2)
        assert backend.batch_set_v1(keys, page_indices(0, 3)) == [True] * 3
    for tp_size in (4, 1):
        for rank in range(tp_size):
            pool = rank_pool(kv, tp_size, reader_layout)
            config, backend = open_rank(rank, tp_size, pool, extra)
            opened.append(backend)
            assert config.should_split_heads is (tp_size < 4 and reader_layout == "page_head")
            assert backend.batch_exists(keys) == 3
            assert backend.batch_get_v1(keys, page_indices(4, 3)) == [True] * 3
            for slot in range(3):
                got = rank_heads(pool, 4 + slot).view(torch.uint8)
                assert torch.equal(got, expected_heads(kv, slot, rank, tp_size).view(torch.uint8))
    for backend in opened:
        backend.clear()
        backend.close()


def test_without_tp_lcm_size_tp4_misses_tp2_pages(tmp_path: Path) -> None:
    kv = global_kv(1, heads=8)
    keys = ["a" * 64]
    extra = extra_config_for("file", path=str(tmp_path))
    pool = rank_pool(kv, 2, "page_head")
    config, writer = open_rank(0, 2, pool, extra)
    assert config.tp_lcm_size is None and config.should_split_heads is False
    assert writer.batch_set_v1(keys, page_indices(0, 1)) == [True]
    _, reader = open_rank(0, 4, rank_pool(kv, 4, "page_head"), extra)
    assert reader.batch_exists(keys) == 0
    for backend in (writer, reader):
        backend.clear()
        backend.close()
