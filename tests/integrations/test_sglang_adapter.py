"""The SGLang adapter without SGLang: construction, byte-exact transfers, never-raise, stats, pool layouts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hicache_storage import BackendLoadError, ConfigError, HostKVPool, make_config, testing
from hicache_storage.integrations import sglang as adapter
from hicache_storage.integrations.sglang import SGLangBackend, extra_config_for, launch_args, sdk_config

PAGE = 4


def make_pool(layout: str = "page_first", is_mla: bool = False, num_pages: int = 8) -> HostKVPool:
    return testing.make_pool(layout, is_mla, num_pages, page_size=PAGE, kv_cache_dim=16, seed=7)


slots = testing.page_indices
page_bytes = testing.page_bytes


def make_adapter(tmp_path: Path, pool: Any = None, backend: str = "file", **options: Any) -> SGLangBackend:
    opts = {"path": str(tmp_path / "kv")} if backend == "file" else {}
    opts.update(options)
    config = make_config("org/model", extra_config=extra_config_for(backend, **opts))
    instance = SGLangBackend(config, {})
    instance.register_mem_pool_host(pool if pool is not None else make_pool())
    return instance


KEYS = [f"{i:064x}" for i in range(1, 6)]


@pytest.mark.parametrize("backend", ["file", "sim"])
def test_v1_round_trip_is_byte_exact(tmp_path: Path, backend: str) -> None:
    pool = make_pool()
    store = make_adapter(tmp_path, pool, backend)
    expected = [page_bytes(pool, p) for p in range(5)]
    assert store.batch_set_v1(KEYS, slots(0, 5)) == [True] * 5
    assert store.batch_exists([*KEYS, "f" * 64]) == 5
    assert store.batch_get_v1(KEYS, slots(3, 5)) == [True] * 5
    assert [page_bytes(pool, p) for p in range(3, 8)] == expected
    store.close()


def test_v0_path_as_sglang_drives_it(tmp_path: Path) -> None:
    """SGLang's generic path: ``get_data_page`` then ``batch_set``; dummy pages, ``batch_get``, then
    ``set_from_flat_data_page``."""
    pool = make_pool("layer_first")
    store = make_adapter(tmp_path, pool)
    pages = [pool.get_data_page(p * PAGE) for p in range(3)]
    assert store.batch_set(KEYS[:3], pages) is True
    got = store.batch_get(KEYS[:4], [pool.get_dummy_flat_data_page() for _ in range(4)])
    assert got[3] is None
    for number, data in enumerate(got[:3]):
        assert data is not None
        pool.set_from_flat_data_page((number + 4) * PAGE, data)
        assert page_bytes(pool, number + 4) == page_bytes(pool, number)
    assert store.exists(KEYS[0]) and not store.exists(KEYS[4])


def test_batch_calls_never_raise(tmp_path: Path) -> None:
    store = make_adapter(tmp_path)
    assert store.batch_set_v1(KEYS[:2], slots(0, 1)) == [False, False]  # wrong host_indices length
    assert store.batch_get_v1(["../etc"], slots(0, 1)) == [False]  # unsafe key
    assert store.batch_get(KEYS[:2], [torch.zeros(3)] * 2) == [None, None]  # wrong page size
    assert store.batch_set(KEYS[:1], None) is False
    assert store.batch_exists(["bad key"]) == 0
    assert store.exists("") is False
    assert store.get("") is None and store.set("", None) is False
    errors = store.sdk_stats()["adapter"]["errors"]
    assert errors["batch_set_v1"] == 1 and errors["batch_get_v1"] == 1 and errors["batch_exists"] == 1
    store.close()
    assert store.batch_get_v1(KEYS[:1], slots(0, 1)) == [False]  # closed
    store.close()  # idempotent


def test_v2_sidecar_calls_report_no_hits(tmp_path: Path) -> None:
    store = make_adapter(tmp_path)
    transfer = SimpleNamespace(name="mamba", keys=KEYS[:2])
    assert store.batch_get_v2([transfer]) == {"mamba": [False, False]}
    assert store.batch_set_v2([transfer]) == {"mamba": [False, False]}


def test_construction_errors_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"extra_config\.backend"):
        SGLangBackend(make_config(extra_config={"backend_name": "x"}), {})
    with pytest.raises(BackendLoadError, match="no_such_backend"):
        SGLangBackend(make_config(extra_config=extra_config_for("no_such_backend")), {})
    with pytest.raises(ConfigError, match="unknown option"):
        SGLangBackend(make_config(extra_config=extra_config_for("file", path=str(tmp_path), bogus=1)), {})


def test_sdk_config_from_an_engine_config() -> None:
    engine = SimpleNamespace(
        tp_rank=1,
        tp_size=2,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=True,
        is_page_first_layout=True,
        model_name="org/model",
        extra_config={"backend": "sim"},
    )  # an older SGLang: no dp_rank, dcp_* or logical_page_size
    config = sdk_config(engine)
    assert (config.tp_rank, config.tp_size, config.dcp_size, config.extra_config) == (1, 2, 1, {"backend": "sim"})
    engine.dcp_size = 2
    with pytest.raises(ConfigError, match="dcp_size"):
        sdk_config(engine)


def test_launch_args_are_what_sglang_parses() -> None:
    args = launch_args("file", path="/var/cache/kv")
    assert args[:3] == ["--enable-hierarchical-cache", "--hicache-storage-backend", "dynamic"]
    extra = json.loads(args[4])
    assert extra == {
        "backend_name": "hicache_storage",
        "module_path": "hicache_storage.integrations.sglang",
        "class_name": "SGLangBackend",
        "interface_v1": 1,
        "backend": "file",
        "path": "/var/cache/kv",
    }


@dataclass
class FakeStorageMetrics:
    prefetch_pgs: list[int] = field(default_factory=list)
    backup_pgs: list[int] = field(default_factory=list)
    prefetch_bandwidth: list[float] = field(default_factory=list)
    backup_bandwidth: list[float] = field(default_factory=list)


def test_get_stats_converts_to_sglang_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool()
    config = make_config("m", extra_config=extra_config_for("sim"))
    config.enable_storage_metrics = True
    store = SGLangBackend(config, {})
    store.register_mem_pool_host(pool)
    store.batch_set_v1(KEYS[:3], slots(0, 3))
    store.batch_get_v1(KEYS[:2], slots(4, 2))
    monkeypatch.setattr(adapter, "_storage_metrics_class", lambda: FakeStorageMetrics)
    metrics = store.get_stats()
    assert isinstance(metrics, FakeStorageMetrics)
    assert metrics.backup_pgs == [3] and metrics.prefetch_pgs == [2]
    assert len(metrics.backup_bandwidth) == 1 and metrics.backup_bandwidth[0] > 0
    assert metrics.hicache_storage["ops"]["set"]["ok"] == 3  # type: ignore[attr-defined]
    assert store.get_stats().backup_pgs == []  # samples are drained by each call


def test_get_stats_without_sglang_is_the_sdk_dict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_adapter(tmp_path)
    monkeypatch.setattr(adapter, "_storage_metrics_class", lambda: None)
    monkeypatch.setattr(adapter, "sglang_available", lambda: False)
    stats = store.get_stats()
    assert stats["backend"] == "FileBackend" and "adapter" in stats


class SGLangStyleMHAPool:
    """Exposes a pool the way SGLang's MHA host pool does: ``get_page_buffer_meta``, no ``page_segments``.

    For ``layer_first`` SGLang lists a page's segments as K0, V0, K1, V1, ... (per layer).
    """

    def __init__(self, inner: HostKVPool) -> None:
        self._inner = inner
        for name in ("layout", "page_size", "dtype", "size", "size_per_token", "layer_num", "kv_buffer"):
            setattr(self, name, getattr(inner, name))
        self.head_num, self.head_dim = inner.head_num, inner.head_dim

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        assert self.layout == "layer_first"
        item = self.kv_buffer.element_size()
        token = self.head_num * self.head_dim * item
        base, v_offset = self.kv_buffer.data_ptr(), self.layer_num * self.size * token
        ptrs: list[int] = []
        for index in indices.tolist()[:: self.page_size]:
            for layer in range(self.layer_num):
                k_ptr = base + index * token + layer * self.size * token
                ptrs += [k_ptr, k_ptr + v_offset]
        return ptrs, [self.page_size * token] * len(ptrs)

    def get_data_page(self, index: int, flat: bool = True) -> torch.Tensor:
        return self.kv_buffer[:, :, index : index + self.page_size].flatten()

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(self._inner.bytes_per_page // 2, dtype=self.dtype)


def test_sglang_layer_first_pool_is_stored_in_flat_page_order(tmp_path: Path) -> None:
    """A page written zero-copy from an SGLang-style pool reads back through v0 as its flat page."""
    ours = make_pool("layer_first")
    theirs = SGLangStyleMHAPool(ours)
    store = make_adapter(tmp_path, theirs)
    assert store.batch_set_v1(KEYS[:2], slots(1, 2)) == [True, True]
    flat = store.batch_get(KEYS[:2], [theirs.get_dummy_flat_data_page() for _ in range(2)])
    for number, data in enumerate(flat):
        assert data is not None
        assert torch.equal(data.view(torch.uint8), theirs.get_data_page((number + 1) * PAGE).view(torch.uint8))
    # and our own pool, sharing the same key space, reads the same bytes
    reader = make_adapter(tmp_path, make_pool("layer_first"))
    target = reader.mem_pool_host
    target.kv_buffer.zero_()
    assert reader.batch_get_v1(KEYS[:2], slots(5, 2)) == [True, True]
    assert page_bytes(target, 5) == page_bytes(ours, 1)
