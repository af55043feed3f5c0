"""Multi-pool (v2) calls of the base class, through the in-memory reference backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from core_support import MemoryBackend, memory_of

from hicache_storage import (
    ConfigError,
    HiCacheStorage,
    InvalidRequestError,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    count_pool_hits,
    make_config,
)
from hicache_storage import testing as kit
from hicache_storage.config import HiCacheStorageConfig

PAGE = kit.PAGE_SIZE


@pytest.fixture
def pools() -> dict[str, Any]:
    return kit.make_hybrid_pools()


@pytest.fixture
def backend(pools: dict[str, Any]) -> HiCacheStorage:
    b = HiCacheStorage(MemoryBackend, make_config("m", extra_config={"resilience": False}))
    kit.attach_hybrid_pools(b, pools)
    return b


def slots(pool: Any, pages: Sequence[int]) -> torch.Tensor:
    size = int(pool.page_size)
    return torch.tensor([p * size + t for p in pages for t in range(size)], dtype=torch.int64)


def image(pool: Any, page: int) -> bytes:
    return bytes(pool.get_data_page(page * int(pool.page_size), flat=True).view(torch.uint8).numpy())


def put_kv(backend: HiCacheStorage, keys: list[str]) -> None:
    assert backend.batch_set_v1(keys, kit.page_indices(0, len(keys))) == [True] * len(keys)


@pytest.mark.parametrize("name", ["swa", "indexer", "mamba"])
def test_round_trip_per_pool_is_byte_exact(backend: HiCacheStorage, pools: dict[str, Any], name: str) -> None:
    pool = pools[name]
    keys = kit.random_keys(3)
    written = [image(pool, p) for p in range(3)]
    result = backend.batch_set_v2([PoolTransfer(name=name, host_indices=slots(pool, [0, 1, 2]), keys=keys)])
    assert result == {name: [True, True, True]}
    got = backend.batch_get_v2([PoolTransfer(name=name, host_indices=slots(pool, [5, 6, 7]), keys=keys)])
    assert got == {name: [True, True, True]}
    assert [image(pool, p) for p in (5, 6, 7)] == written
    assert count_pool_hits(got) == {name: 3}


def test_results_are_keyed_by_the_transfer_name_objects(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(1)
    result = backend.batch_set_v2([PoolTransfer(name=PoolName.SWA, host_indices=slots(pools["swa"], [0]), keys=keys)])
    (name,) = result
    assert name is PoolName.SWA


def test_sidecar_and_kv_pages_of_one_hash_never_alias(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(2)
    backend.batch_set_v2([PoolTransfer(name="mamba", host_indices=slots(pools["mamba"], [0, 1]), keys=keys)])
    assert backend.batch_exists_each(keys) == [False, False]
    put_kv(backend, keys)
    assert backend.batch_get_v2([PoolTransfer(name="swa", host_indices=slots(pools["swa"], [4, 5]), keys=keys)]) == {
        "swa": [False, False]
    }
    spaces = {backend.pool_keyspace(n).digest for n in ("kv", "swa", "indexer", "mamba")}
    assert len(spaces) == 4


def test_all_pages_pool_gates_the_kv_hit(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(5)
    put_kv(backend, keys)
    indexer = pools["indexer"]
    backend.batch_set_v2(
        [PoolTransfer(name="indexer", host_indices=slots(indexer, [0, 1, 3]), keys=[keys[i] for i in (0, 1, 3)])]
    )
    result = backend.batch_exists_v2(
        keys, [PoolTransfer(name="indexer", keys=keys, hit_policy=PoolHitPolicy.ALL_PAGES)]
    )
    assert result.kv_hit_pages == 2
    assert result.extra_pool_hit_pages == {PoolName.KV: 5, "indexer": 2}
    assert result.restorable_prefix_pages == [1, 2]


def test_trailing_state_at_node_boundaries_leaves_holes(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(6)
    put_kv(backend, keys)
    mamba = pools["mamba"]
    at = [2, 4]  # state checkpoints after pages 3 and 5 (prefix lengths 3 and 5)
    backend.batch_set_v2([PoolTransfer(name="mamba", host_indices=slots(mamba, [0, 1]), keys=[keys[i] for i in at])])
    query = [PoolTransfer(name=PoolName.MAMBA, keys=[keys[-1]], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
    result = backend.batch_exists_v2(keys, query)
    assert result.restorable_prefix_pages == [3, 5]
    assert result.kv_hit_pages == 5
    assert result.extra_pool_hit_pages[PoolName.MAMBA] == 5


def test_trailing_window_needs_every_page_of_it(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(5)
    put_kv(backend, keys)
    swa = pools["swa"]
    held = [1, 2, 4]
    backend.batch_set_v2([PoolTransfer(name="swa", host_indices=slots(swa, held), keys=[keys[i] for i in held])])
    query = [PoolTransfer(name="swa", keys=keys[-2:], hit_policy=PoolHitPolicy.TRAILING_PAGES)]  # window 2
    assert backend.batch_exists_v2(keys, query).restorable_prefix_pages == [3]


def test_block_groups_report_their_own_verdict_and_never_gate(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(4)
    put_kv(backend, keys)
    group_keys = kit.random_keys(6)  # 3 groups of 2 keys, each covering 1 KV page
    indexer = pools["indexer"]
    backend.batch_set_v2([PoolTransfer(name="indexer", host_indices=slots(indexer, [0, 1, 2, 3]), keys=group_keys[:4])])
    query = [
        PoolTransfer(
            name="indexer", keys=group_keys, hit_policy=PoolHitPolicy.BLOCK_GROUPS, block_pages=1, group_pages=2
        )
    ]
    result = backend.batch_exists_v2(keys, query)
    assert result.kv_hit_pages == 4 and result.restorable_prefix_pages == [1, 2, 3, 4]
    assert result.extra_pool_hit_pages["indexer"] == 2


def test_no_kv_hit_looks_up_no_sidecar(backend: HiCacheStorage) -> None:
    before = len(memory_of(backend).primitive_calls)
    result = backend.batch_exists_v2(kit.random_keys(3), [PoolTransfer(name="swa", keys=["a"])])
    assert (result.kv_hit_pages, result.extra_pool_hit_pages, result.restorable_prefix_pages) == (0, {}, [])
    assert [call for call, _ in memory_of(backend).primitive_calls[before:]] == ["exists"]


def test_empty_transfer_returns_an_empty_list(backend: HiCacheStorage) -> None:
    assert backend.batch_set_v2([PoolTransfer(name="swa", keys=[], host_indices=None)]) == {"swa": []}
    assert backend.batch_get_v2([]) == {}


def test_prefix_keys_reach_the_primitives(pools: dict[str, Any]) -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []

    class Recording(MemoryBackend):
        def write_pages(self, keys, pages, context):  # type: ignore[no-untyped-def]
            seen.append((context.pool, context.prefix_keys))
            return super().write_pages(keys, pages, context)

    b = HiCacheStorage(Recording, make_config("m", extra_config={"resilience": False}))
    kit.attach_hybrid_pools(b, pools)
    info = SimpleNamespace(prefix_keys=["p0", "p1"], extra_info=None)
    b.batch_set_v2([PoolTransfer(name="swa", host_indices=slots(pools["swa"], [0]), keys=["k"])], info)
    assert seen == [("swa", ("p0", "p1"))]


# ----------------------------------------------------------------------------- bad input, nothing written
def test_unknown_pool_is_named(backend: HiCacheStorage) -> None:
    with pytest.raises(InvalidRequestError, match=r"pool 'draft' is not registered \(registered: .*'mamba'"):
        backend.batch_set_v2([PoolTransfer(name="draft", keys=["a"], host_indices=torch.arange(4))])


def test_a_bad_transfer_anywhere_writes_nothing(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(2)
    good = PoolTransfer(name="swa", host_indices=slots(pools["swa"], [0, 1]), keys=keys)
    bad = PoolTransfer(name="mamba", host_indices=slots(pools["mamba"], [0]), keys=keys)  # 1 slot for 2 keys
    with pytest.raises(InvalidRequestError, match="pool 'mamba': host_indices has 1 entries; expected"):
        backend.batch_set_v2([good, bad])
    assert memory_of(backend).records == {}


@pytest.mark.parametrize(
    "indices", [torch.tensor([0.0, 1.0, 2.0, 3.0]), [0.0, 1.0, 2.0, 3.0], torch.tensor([True, False, True, True])]
)
def test_float_and_boolean_indices_are_refused(backend: HiCacheStorage, indices: Any) -> None:
    with pytest.raises(InvalidRequestError, match="integer"):
        backend.batch_set_v1(["a"], indices)
    with pytest.raises(InvalidRequestError, match="pool 'swa'"):
        backend.batch_set_v2([PoolTransfer(name="swa", host_indices=indices, keys=["a"])])
    assert memory_of(backend).records == {}


def test_v2_before_the_pool_set_is_complete(pools: dict[str, Any]) -> None:
    b = HiCacheStorage(MemoryBackend, make_config("m", extra_config={"resilience": False}))
    b.register_mem_pool_host(pools["kv"])
    b.register_mem_host_pool_v2(pools["swa"], "swa")
    with pytest.raises(InvalidRequestError, match="on_host_pools_registered"):
        b.batch_exists_v2(["a"], [])
    b.on_host_pools_registered()
    assert b.batch_exists_v2(["a"], []).kv_hit_pages == 0


def test_same_pool_again_is_fine_another_geometry_is_not(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    backend.register_mem_host_pool_v2(pools["swa"], PoolName.SWA)
    other = kit.make_pool(num_pages=16, layer_num=2, head_dim=8)
    with pytest.raises(ConfigError, match=r"pool 'swa'.*another geometry"):
        backend.register_mem_host_pool_v2(other, "swa")


def test_unknown_hit_policy_and_bad_block_geometry(backend: HiCacheStorage) -> None:
    put_kv(backend, ["a"])
    with pytest.raises(InvalidRequestError, match="unknown hit_policy 'newest'"):
        backend.batch_exists_v2(["a"], [PoolTransfer(name="swa", keys=["a"], hit_policy="newest")])
    with pytest.raises(InvalidRequestError, match="BLOCK_GROUPS needs block_pages >= 1"):
        backend.batch_exists_v2(["a"], [PoolTransfer(name="swa", keys=["a"], hit_policy=PoolHitPolicy.BLOCK_GROUPS)])


# ----------------------------------------------------------------------------- key identity per pool
def test_mamba_state_is_keyed_per_tp_rank_even_for_mla(pools: dict[str, Any]) -> None:
    config = make_config("m", tp_rank=1, tp_size=2, is_mla_model=True, extra_config={"resilience": False})
    b = HiCacheStorage(MemoryBackend, config)
    mla_pools = dict(pools, kv=kit.make_pool(is_mla=True))
    kit.attach_hybrid_pools(b, mla_pools)
    assert "tp" not in b.pool_keyspace("kv").rank_suffix
    assert b.pool_keyspace("mamba").rank_suffix.startswith("tp1of2")
    assert "tp" not in b.pool_keyspace("swa").rank_suffix


def test_sidecar_geometry_enters_the_key(pools: dict[str, Any]) -> None:
    spaces = []
    for state in (kit.make_state_pool(layer_num=2), kit.make_state_pool(layer_num=3)):
        b = HiCacheStorage(MemoryBackend, make_config("m"))
        b.register_mem_pool_host(pools["kv"])
        b.register_mem_host_pool_v2(state, "mamba")
        spaces.append(b.pool_keyspace("mamba").digest)
    assert spaces[0] != spaces[1]


def test_unknown_config_fields_enter_the_key_digest(pools: dict[str, Any]) -> None:
    @dataclasses.dataclass
    class NewerConfig(HiCacheStorageConfig):
        model_identity_hash: str | None = None

    base = dataclasses.asdict(make_config("m"))
    digests = set()
    for identity in (None, "rev-a", "rev-b"):
        b = HiCacheStorage(MemoryBackend, NewerConfig(**base, model_identity_hash=identity))
        b.register_mem_pool_host(pools["kv"])
        digests.add(b.keyspace.digest if b.keyspace else "")
    assert len(digests) == 3
    plain = HiCacheStorage(MemoryBackend, make_config("m"))
    plain.register_mem_pool_host(pools["kv"])
    assert plain.keyspace is not None and plain.keyspace.digest in digests  # None adds nothing


# ----------------------------------------------------------------------------- pools SGLang hands over
def test_a_logical_anchor_holds_no_kv_bytes(pools: dict[str, Any]) -> None:
    anchor = SimpleNamespace(kv_buffer=None, page_size=PAGE, size=64, layout="page_first", dtype=torch.bfloat16)
    b = HiCacheStorage(MemoryBackend, make_config("m", extra_config={"resilience": False}))
    b.register_mem_pool_host(anchor)
    b.register_mem_host_pool_v2(pools["indexer"], "indexer")
    b.on_host_pools_registered()
    keys = kit.random_keys(3)
    b.batch_set_v2([PoolTransfer(name="indexer", host_indices=slots(pools["indexer"], [0, 1]), keys=keys[:2])])
    result = b.batch_exists_v2(keys, [PoolTransfer(name="indexer", keys=keys)])
    assert result.kv_hit_pages == 2
    with pytest.raises(InvalidRequestError, match="holds no bytes"):
        b.batch_set_v1(keys[:1], kit.page_indices(0, 1))


def test_a_host_pool_group_attaches_every_entry(pools: dict[str, Any]) -> None:
    entries = [
        SimpleNamespace(name=PoolName.KV, host_pool=pools["kv"]),
        SimpleNamespace(name=PoolName.MAMBA, host_pool=pools["mamba"]),
    ]
    group = SimpleNamespace(entries=entries, anchor_entry=entries[0])
    b = HiCacheStorage(MemoryBackend, make_config("m"))
    b.register_mem_pool_host(group)
    assert set(b.registered_pools()) == {"kv", "mamba"}
    assert b.mem_pool_host is pools["kv"]


def test_a_pool_without_zero_copy_views_is_copied(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    state = pools["mamba"]

    class CopyOnly:
        """A state pool whose ``get_page_buffer_meta`` refuses, as SGLang's does for slot side states."""

        def __getattr__(self, name: str) -> Any:
            if name in ("page_segments", "get_page_buffer_meta"):
                raise AttributeError(name)
            return getattr(state, name)

    b = HiCacheStorage(MemoryBackend, make_config("m", extra_config={"resilience": False}))
    b.register_mem_pool_host(pools["kv"])
    b.register_mem_host_pool_v2(CopyOnly(), "mamba")
    b.on_host_pools_registered()
    keys = kit.random_keys(2)
    written = [image(state, p) for p in (0, 1)]
    assert b.batch_set_v2([PoolTransfer(name="mamba", host_indices=slots(state, [0, 1]), keys=keys)])["mamba"] == [
        True,
        True,
    ]
    assert b.batch_get_v2([PoolTransfer(name="mamba", host_indices=slots(state, [8, 9]), keys=keys)])["mamba"] == [
        True,
        True,
    ]
    assert [image(state, p) for p in (8, 9)] == written


@pytest.mark.parametrize(
    ("keys", "shown"),
    [("abc", "str"), ({"a", "b"}, "set"), ((key for key in ["a"]), "generator"), (["a", 3], "must be a str")],
)
def test_v2_keys_are_validated_like_v1(backend: HiCacheStorage, pools: dict[str, Any], keys: Any, shown: str) -> None:
    transfer = PoolTransfer(name="swa", host_indices=slots(pools["swa"], [0]), keys=keys)
    with pytest.raises(InvalidRequestError, match=shown):
        backend.batch_set_v2([transfer])
    with pytest.raises(InvalidRequestError, match=shown):
        backend.batch_get_v2([transfer])
    assert memory_of(backend).records == {}


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 2.5, "4", True])
def test_v2_numeric_fields_must_be_finite_integers(backend: HiCacheStorage, value: Any) -> None:
    query = [
        PoolTransfer(name="mamba", keys=["a"], hit_policy=PoolHitPolicy.BLOCK_GROUPS, block_pages=value, group_pages=1)
    ]
    with pytest.raises(InvalidRequestError, match="block_pages must be a finite integer"):
        backend.batch_exists_v2(kit.random_keys(2), query)


def test_non_strict_v2_fails_only_the_malformed_transfer(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    keys = kit.random_keys(2)
    good = PoolTransfer(name="swa", host_indices=slots(pools["swa"], [0, 1]), keys=keys)
    short = PoolTransfer(name="mamba", host_indices=slots(pools["mamba"], [0]), keys=keys)  # 1 slot for 2 keys
    unknown = PoolTransfer(name="draft", host_indices=torch.arange(4), keys=["x"])
    assert backend.batch_set_v2([good, short, unknown], strict=False) == {
        "swa": [True, True],
        "mamba": [False, False],
        "draft": [False],
    }
    assert backend.get_stats()["counters"]["malformed_transfers"] == 2
    assert backend.batch_get_v2([good], strict=False) == {"swa": [True, True]}


def test_trailing_windows_are_sized_by_placeholder_keys(backend: HiCacheStorage, pools: dict[str, Any]) -> None:
    """SGLang's prefetch query names no real keys for trailing pools: the keys only size the window."""
    keys = kit.random_keys(4)
    put_kv(backend, keys)
    backend.batch_set_v2([PoolTransfer(name="mamba", host_indices=slots(pools["mamba"], [0]), keys=[keys[1]])])
    query = [PoolTransfer(name="mamba", keys=["__placeholder__"], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
    assert backend.batch_exists_v2(keys, query).restorable_prefix_pages == [2]
