"""The SGLang adapter without SGLang: transfers (v0, v1, multi-pool v2), never-raise, stats, layouts, key identity."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from engine_configs import engine_fields

from hicache_storage import BackendLoadError, ConfigError, HostKVPool, make_config, testing
from hicache_storage.integrations import sglang as adapter
from hicache_storage.integrations.sglang import LOADER_KEYS, SGLangBackend, extra_config_for, launch_args, sdk_config
from hicache_storage.pools import PoolHitPolicy, PoolName

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


# --------------------------------------------------------------------------- multi-pool (v2)
def make_hybrid_adapter(tmp_path: Path, backend: str = "file", **options: Any) -> tuple[SGLangBackend, dict[str, Any]]:
    """An adapter with a hybrid model's pools registered the way SGLang's hybrid controller does."""
    opts = {"path": str(tmp_path / "kv")} if backend == "file" else {}
    opts.update(options)
    config = make_config("org/hybrid", extra_config=extra_config_for(backend, **opts))
    config.enable_storage_metrics = True
    store = SGLangBackend(config, {})
    pools = testing.make_hybrid_pools(num_pages=8, page_size=PAGE)
    store.register_mem_pool_host(pools["kv"])
    for name, pool in pools.items():  # SGLang registers every entry of its host pool group, KV included
        store.register_mem_host_pool_v2(pool, name)
    store.on_host_pools_registered()
    return store, pools


def transfer(
    name: Any, keys: list[str] | None, first: int = 0, *, policy: Any = PoolHitPolicy.ALL_PAGES, **more: Any
) -> SimpleNamespace:
    """A v2 transfer (SGLang's ``PoolTransfer`` fields) of ``keys`` at pages ``first...`` of the pool."""
    page = 1 if str(name) == "mamba" else PAGE
    indices = None if keys is None else torch.arange(first * page, (first + len(keys)) * page)
    return SimpleNamespace(
        name=name,
        keys=keys,
        host_indices=more.pop("host_indices", indices),
        hit_policy=policy,
        indices_from_pool=more.pop("indices_from_pool", None),
        block_pages=0,
        group_pages=0,
        **more,
    )


@pytest.mark.parametrize("backend", ["file", "sim"])
def test_v2_round_trip_of_every_sidecar_is_byte_exact(tmp_path: Path, backend: str) -> None:
    store, pools = make_hybrid_adapter(tmp_path, backend)
    kv, swa, mamba, indexer = PoolName.KV, PoolName.SWA, "mamba", PoolName.INDEXER  # enum members and a str
    written = {name: [page_bytes(pools[str(name)], p) for p in range(3)] for name in (swa, mamba, indexer)}
    assert store.batch_set_v1(KEYS[:3], slots(0, 3)) == [True] * 3
    sets = [transfer(swa, KEYS[1:3], 1), transfer(mamba, KEYS[2:3], 2), transfer(indexer, KEYS[:3], 0)]
    result = store.batch_set_v2(sets)
    assert result == {swa: [True, True], mamba: [True], indexer: [True] * 3}
    assert [type(name) for name in result] == [PoolName, str, PoolName]  # the names passed, as passed
    assert {id(name) for name in result} == {id(swa), id(mamba), id(indexer)}
    gets = [transfer(swa, KEYS[1:3], 5), transfer(mamba, KEYS[2:3], 6), transfer(indexer, KEYS[:3], 5)]
    assert store.batch_get_v2(gets) == {swa: [True, True], mamba: [True], indexer: [True] * 3}
    assert [page_bytes(pools["swa"], p) for p in (5, 6)] == written[swa][1:]
    assert page_bytes(pools["mamba"], 6) == written[mamba][2]
    assert [page_bytes(pools["indexer"], p) for p in (5, 6, 7)] == written[indexer]
    found = store.batch_exists_v2(
        [*KEYS[:3], KEYS[4]],
        [
            transfer(swa, ["__placeholder__"] * 2, policy=PoolHitPolicy.TRAILING_PAGES),  # SGLang's query placeholders
            transfer(mamba, ["__placeholder__"], policy="trailing_pages"),
            transfer(indexer, None, indices_from_pool=kv),
        ],
    )
    engine_names, result_type = adapter._sglang_pool_types()
    assert isinstance(found, result_type)
    assert (found.kv_hit_pages, found.extra_pool_hit_pages, found.restorable_prefix_pages) == (
        3,
        {kv: 3, swa: 3, mamba: 3, indexer: 3},
        [3],
    )
    kv_key = next(iter(found.extra_pool_hit_pages))
    assert type(kv_key) is engine_names and kv_key is engine_names.KV
    assert store.sdk_stats()["adapter"]["errors"] == {}
    store.close()


def test_v2_results_are_never_none_and_errors_are_counted_misses(tmp_path: Path) -> None:
    store, _ = make_hybrid_adapter(tmp_path)
    _, result_type = adapter._sglang_pool_types()
    good = transfer(PoolName.SWA, KEYS[:2], 0)
    bad = transfer(PoolName.MAMBA, KEYS[:2], 0, host_indices=torch.arange(1))  # 1 slot for 2 keys
    # one malformed transfer fails alone; the well-formed one is still written
    assert store.batch_set_v2([good, bad]) == {PoolName.SWA: [True, True], PoolName.MAMBA: [False, False]}
    assert store.batch_get_v2([bad]) == {PoolName.MAMBA: [False, False]}
    assert store.batch_get_v2([transfer("no_such_pool", KEYS[:1], 0)]) == {"no_such_pool": [False]}
    assert store.batch_get_v2([transfer(PoolName.SWA, ["../etc"], 0)]) == {PoolName.SWA: [False]}
    assert store.batch_set_v2(None) == {}  # type: ignore[arg-type]
    assert store.batch_set_v2([object(), good]) == {PoolName.SWA: [True, True]}  # no name: nothing to key it by
    empty = store.batch_exists_v2(KEYS[:2], [transfer(PoolName.SWA, KEYS[:1], policy="sideways")])
    assert isinstance(empty, result_type) and (empty.kv_hit_pages, empty.extra_pool_hit_pages) == (0, {})
    assert store.batch_exists_v2(["bad key"]).kv_hit_pages == 0
    assert store.batch_exists_v2(KEYS[:1], [transfer("no_such_pool", None)]).kv_hit_pages == 0
    stats = store.sdk_stats()
    assert stats["adapter"]["errors"] == {"batch_set_v2": 1, "batch_exists_v2": 3}  # the calls that raised
    assert stats["counters"]["malformed_transfers"] == 5  # the transfers that failed alone
    store.close()
    assert store.batch_get_v2([good]) == {PoolName.SWA: [False, False]}  # closed
    assert store.batch_exists_v2(KEYS[:1]).kv_hit_pages == 0


def test_v2_backend_faults_and_broken_answers_never_reach_sglang(tmp_path: Path) -> None:
    store, _ = make_hybrid_adapter(tmp_path, "sim", fail_set_rate=1.0, fail_exists_rate=1.0, resilience={"retries": 0})
    swa = transfer(PoolName.SWA, KEYS[:2], 0)
    assert store.batch_set_v2([swa]) == {PoolName.SWA: [False, False]}
    assert store.batch_exists_v2(KEYS[:2], [swa]).kv_hit_pages == 0
    assert store.sdk_stats()["faults"] >= 2
    inner = store.backend
    for answer in (None, ["not", "a", "dict"]):

        def broken(transfers: Any, extra_info: Any = None, answer: Any = answer) -> Any:
            return answer

        inner.batch_get_v2 = broken  # type: ignore[method-assign]
        assert store.batch_get_v2([swa]) == {PoolName.SWA: [False, False]}

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("backend bug")

    inner.batch_set_v2 = explode  # type: ignore[method-assign]
    inner.batch_exists_v2 = explode  # type: ignore[method-assign]
    assert store.batch_set_v2([swa]) == {PoolName.SWA: [False, False]}
    assert store.batch_exists_v2(KEYS[:2], [swa]).extra_pool_hit_pages == {}
    assert store.sdk_stats()["adapter"]["errors"] == {"batch_get_v2": 2, "batch_set_v2": 1, "batch_exists_v2": 1}


def test_v2_calls_before_the_pool_set_is_complete_are_counted_misses(tmp_path: Path) -> None:
    store = make_adapter(tmp_path)
    swa = transfer("swa", KEYS[:2], 0)
    assert store.batch_get_v2([swa]) == {"swa": [False, False]}
    assert store.batch_exists_v2(KEYS[:2], [swa]).kv_hit_pages == 0
    assert store.sdk_stats()["adapter"]["errors"] == {"batch_get_v2": 1, "batch_exists_v2": 1}


def test_v2_registration_errors_fail_the_attach_but_not_a_running_engine(tmp_path: Path) -> None:
    config = make_config("m", extra_config=extra_config_for("sim"))
    with pytest.raises(ConfigError, match="register_mem_pool_host"):
        SGLangBackend(config, {}).on_host_pools_registered()  # no KV pool: SGLang fails the attach
    store, pools = make_hybrid_adapter(tmp_path, "sim")
    other = testing.make_pool(num_pages=8, page_size=PAGE, layer_num=1, head_dim=16)
    store.register_mem_host_pool_v2(other, "swa")  # another geometry, while requests run: counted, not raised
    assert store.sdk_stats()["adapter"]["errors"] == {"register_mem_host_pool_v2": 1}
    assert store.backend.registered_pools()["swa"] is pools["swa"]
    fresh = SGLangBackend(config, {})
    fresh.register_mem_pool_host(pools["kv"])
    fresh.register_mem_host_pool_v2(pools["swa"], "swa")
    with pytest.raises(ConfigError, match="swa"):
        fresh.register_mem_host_pool_v2(other, "swa")  # during the attach: raised


def test_v2_traffic_is_in_sglangs_storage_metrics(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, pools = make_hybrid_adapter(tmp_path, "sim")
    assert store.batch_set_v2([transfer("swa", KEYS[:2], 0), transfer("mamba", KEYS[1:2], 1)]) == {
        "swa": [True, True],
        "mamba": [True],
    }
    assert store.batch_get_v2([transfer("swa", KEYS[:3], 4)]) == {"swa": [True, True, False]}
    monkeypatch.setattr(adapter, "_storage_metrics_class", lambda: FakeStorageMetrics)
    metrics = store.get_stats()
    # one sample per pool of a v2 call, as the SDK's statistics record them
    assert metrics.backup_pgs == [2, 1] and metrics.prefetch_pgs == [3]
    assert len(metrics.backup_bandwidth) == 2 and all(rate > 0 for rate in metrics.backup_bandwidth)
    assert len(metrics.prefetch_bandwidth) == 1 and metrics.prefetch_bandwidth[0] > 0
    assert store.sdk_stats()["ops"]["set"]["bytes"] == 2 * pools["swa"].bytes_per_page + pools["mamba"].size_per_token
    assert store.get_stats().backup_pgs == []  # drained: each sample is reported once


def test_construction_errors_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"extra_config\.backend"):
        SGLangBackend(make_config(extra_config={"backend_name": "x"}), {})
    with pytest.raises(BackendLoadError, match="no_such_backend"):
        SGLangBackend(make_config(extra_config={**LOADER_KEYS, "backend": "no_such_backend"}), {})
    with pytest.raises(ConfigError, match="unknown option"):
        SGLangBackend(
            make_config(extra_config={**LOADER_KEYS, "backend": "file", "path": str(tmp_path), "bogus": 1}), {}
        )


@pytest.mark.parametrize(
    ("backend", "options", "error", "message"),
    [
        ("no_such_backend", {}, BackendLoadError, "no backend named 'no_such_backend'"),
        (
            "file",
            {"path": "/x", "max_byte": 1},
            ConfigError,
            r"extra_config\.max_byte: unknown option \(did you mean max_bytes\?\)",
        ),
        ("file", {"path": "/x", "namespce": "a"}, ConfigError, r"did you mean namespace\?"),
        ("file", {"path": "/x", "fanout_levels": 9}, ConfigError, r"extra_config\.fanout_levels: must be in \[0, 4\]"),
        ("sim", {"manifests": "yes"}, ConfigError, r"extra_config\.manifests: expected true or false, got .yes."),
        ("sim", {"resilience": {"retry": 1}}, ConfigError, r"extra_config\.resilience\.retry"),
    ],
)
def test_extra_config_for_checks_the_options_before_sglang_starts(
    tmp_path: Path, backend: str, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        extra_config_for(backend, **options)
    with pytest.raises(error, match=message):
        launch_args(backend, **options)
    assert not Path("/x").exists()  # nothing was opened or created


def test_sdk_config_from_an_engine_config() -> None:
    engine = SimpleNamespace(
        **engine_fields({"backend": "sim"}, tp_rank=1, tp_size=2)
    )  # an older SGLang: no dp_rank, dcp_* or logical_page_size
    config = sdk_config(engine)
    assert (config.tp_rank, config.tp_size, config.dcp_size, config.extra_config) == (1, 2, 1, {"backend": "sim"})
    engine.dcp_size = 2
    with pytest.raises(ConfigError, match="dcp_size"):
        sdk_config(engine)


def engine_config(path: Path, **more: Any) -> SimpleNamespace:
    """An engine's storage config as SGLang passes it, plus ``more`` fields (a newer SGLang's)."""
    return SimpleNamespace(
        **engine_fields(extra_config_for("file", path=str(path)), enable_storage_metrics=False, **more)
    )


@dataclass
class NewerEngineConfig:
    """A dataclass config with a field this SDK does not know (as a newer SGLang's)."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: str = "org/model"
    extra_config: dict[str, Any] = field(default_factory=dict)
    model_identity_hash: str | None = None


def test_unknown_engine_config_fields_enter_the_key_identity(tmp_path: Path) -> None:
    assert sdk_config(engine_config(tmp_path, model_identity_hash="rev-a")).identity_fields == {
        "model_identity_hash": "rev-a"
    }
    assert sdk_config(NewerEngineConfig(model_identity_hash="q4")).identity_fields == {"model_identity_hash": "q4"}
    assert sdk_config(engine_config(tmp_path)).identity_fields == {}

    def store(**more: Any) -> SGLangBackend:
        instance = SGLangBackend(engine_config(tmp_path, **more), {})
        instance.register_mem_pool_host(make_pool())
        return instance

    rev_a, rev_b, plain = store(model_identity_hash="rev-a"), store(model_identity_hash="rev-b"), store()
    assert rev_a.batch_set_v1(KEYS[:3], slots(0, 3)) == [True] * 3
    assert rev_a.batch_exists(KEYS[:3]) == 3
    assert rev_b.batch_exists(KEYS[:3]) == 0  # another model revision: same path, no shared page
    assert plain.batch_exists(KEYS[:3]) == 0
    # no unknown field: the keys of a config without one are unchanged
    direct = make_adapter(tmp_path, backend="file", path=str(tmp_path))
    assert plain.backend.pool_keyspace().storage_key(KEYS[0]) == direct.backend.pool_keyspace().storage_key(KEYS[0])
    assert rev_a.backend.pool_keyspace().storage_key(KEYS[0]) != plain.backend.pool_keyspace().storage_key(KEYS[0])


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
