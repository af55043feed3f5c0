"""Head shards: pages written by one TP size read, head by head, by others (through a shared in-memory store)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from core_support import MemoryBackend

from hicache_storage import ConfigError, HostKVPool, load_backend, make_config
from hicache_storage.testing import page_indices, random_keys
from hicache_storage.testing.cross_tp import expected_heads, fill_rank, global_kv, rank_heads, tp_group

LAYOUTS = ["page_head", "page_first", "layer_first", "page_first_direct"]
SHARED: dict[str, bytes] = {}


class SharedMemory(MemoryBackend):
    """The reference backend over one dict shared by every instance (one store, many ranks)."""

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.records = SHARED


@pytest.fixture(autouse=True)
def _empty_store():
    SHARED.clear()
    yield
    SHARED.clear()


def write_tp(kv: torch.Tensor, keys: list[str], tp_size: int, layout: str, **kwargs: Any) -> list[Any]:
    group = tp_group(SharedMemory, {}, kv, tp_size, layout, **kwargs)
    for rank, storage in enumerate(group):
        fill_rank(storage.mem_pool_host, kv, rank, tp_size)
        assert storage.batch_set_v1(keys, page_indices(0, len(keys))) == [True] * len(keys)
    return group


def read_hits(kv: torch.Tensor, keys: list[str], tp_size: int, layout: str, **kwargs: Any) -> list[list[bool]]:
    """Each rank's per-page hits, after checking every hit byte for byte against ``kv``."""
    hits = []
    for rank, storage in enumerate(tp_group(SharedMemory, {}, kv, tp_size, layout, **kwargs)):
        found = storage.batch_get_v1(keys, page_indices(4, len(keys)))
        exists = storage.batch_exists_each(keys)
        assert all(exists[slot] for slot, hit in enumerate(found) if hit)  # exists cannot see damage, only absence
        for slot, hit in enumerate(found):
            if hit:
                got = rank_heads(storage.mem_pool_host, 4 + slot).view(torch.uint8)
                assert torch.equal(got, expected_heads(kv, slot, rank, tp_size).view(torch.uint8))
        hits.append(found)
    return hits


@pytest.mark.parametrize("writer", LAYOUTS)
@pytest.mark.parametrize("reader", ["page_head", "page_first"])
def test_tp2_pages_are_exact_hits_for_tp4_and_tp1(writer, reader):
    kv, keys = global_kv(3), random_keys(3)
    write_tp(kv, keys, 2, writer)
    assert read_hits(kv, keys, 4, reader) == [[True] * 3] * 4
    assert read_hits(kv, keys, 1, reader) == [[True] * 3]


def test_tp4_pages_are_hits_for_tp2():
    kv, keys = global_kv(2), random_keys(2)
    write_tp(kv, keys, 4, "layer_first")
    assert read_hits(kv, keys, 2, "page_head") == [[True] * 2] * 2


def test_shard_keys_name_heads_not_writer():
    kv, keys = global_kv(1), random_keys(1)
    group = write_tp(kv, keys, 2, "page_head")
    tails = sorted(key.split(".", 2)[2] for key in SHARED if keys[0] in key)
    assert tails == [f"h{index}of4.pp0of1.cp0of1" for index in range(4)]
    assert not any("tp" in key.split(".", 1)[1] for key in SHARED)
    assert group[0].keyspace == group[1].keyspace
    assert group[0].keyspace.page_bytes == group[0].mem_pool_host.bytes_per_page // 2


def test_missing_or_damaged_shard_is_a_miss_for_its_page_only():
    kv, keys = global_kv(3), random_keys(3)
    write_tp(kv, keys, 2, "page_first")
    shard = next(key for key in SHARED if keys[1] in key and ".h3of4." in key)
    del SHARED[shard]
    assert read_hits(kv, keys, 4, "page_first") == [[True] * 3] * 3 + [[True, False, True]]
    assert read_hits(kv, keys, 1, "page_head") == [[True, False, True]]
    assert tp_group(SharedMemory, {}, kv, 4, "page_head")[3].batch_exists_each(keys) == [True, False, True]
    damaged = next(key for key in SHARED if keys[2] in key and ".h0of4." in key)
    SHARED[damaged] = SHARED[damaged][:-1] + bytes([SHARED[damaged][-1] ^ 1])
    assert read_hits(kv, keys, 1, "page_first") == [[True, False, False]]


def test_another_lcm_or_unsplit_deployment_never_shares():
    kv, keys = global_kv(2), random_keys(2)
    write_tp(kv, keys, 2, "page_head", tp_lcm_size=4)
    assert read_hits(kv, keys, 2, "page_head", tp_lcm_size=8) == [[False] * 2] * 2
    assert read_hits(kv, keys, 2, "page_head", tp_lcm_size=None) == [[False] * 2] * 2
    assert read_hits(kv, keys, 2, "page_head", tp_lcm_size=4) == [[True] * 2] * 2


def test_head_shards_option_turns_splitting_off():
    keys = random_keys(1)
    config = make_config("cross-tp", tp_size=2, extra_config={"tp_lcm_size": 4, "head_shards": False})
    storage = load_backend(SharedMemory, config)
    storage.register_mem_pool_host(HostKVPool(num_pages=4, page_size=4, layer_num=2, head_num=4, head_dim=4))
    assert storage.keyspace is not None and storage.keyspace.shards == 0
    assert "tp0of2" in storage.keyspace.storage_key(keys[0])


def test_sdk_option_sets_the_lcm_for_direct_callers():
    config = make_config("cross-tp", tp_size=2, extra_config={"tp_lcm_size": 4})
    storage = load_backend(SharedMemory, config)
    storage.register_mem_pool_host(HostKVPool(num_pages=4, page_size=4, layer_num=2, head_num=4, head_dim=4))
    assert storage.keyspace is not None and storage.keyspace.shards == 4


@pytest.mark.parametrize("where", ["config", "extra_config"])
def test_tp_size_not_dividing_the_lcm_is_a_config_error(where):
    config = make_config("m", tp_size=3, extra_config={"tp_lcm_size": 4} if where == "extra_config" else {})
    if where == "config":
        config.tp_lcm_size = 4
    with pytest.raises(ConfigError, match=r"tp_size=3 does not divide tp_lcm_size=4"):
        load_backend(SharedMemory, config)


@pytest.mark.parametrize(
    ("heads", "tp_size", "extra", "why"),
    [(3, 1, {}, "do not divide by tp_lcm_size=4"), (1, 4, {"kv_heads": 2}, "replicated")],
)
def test_indivisible_or_replicated_heads_turn_sharing_off_with_one_warning(heads, tp_size, extra, why, caplog):
    config = make_config("m", tp_size=tp_size, extra_config={"tp_lcm_size": 4, **extra})
    storage = load_backend(SharedMemory, config)
    with caplog.at_level(logging.WARNING, logger="hicache_storage.pools.shard_plan"):
        storage.register_mem_pool_host(HostKVPool(num_pages=4, page_size=4, layer_num=2, head_num=heads, head_dim=4))
    assert [record.getMessage() for record in caplog.records if why in record.getMessage()] != []
    assert len(caplog.records) == 1
    assert storage.keyspace is not None and storage.keyspace.shards == 0
    assert f"tp0of{tp_size}" in storage.keyspace.storage_key("k")


def test_mla_keys_are_unchanged():
    config = make_config("m", tp_size=2, is_mla_model=True, extra_config={"tp_lcm_size": 4})
    storage = load_backend(SharedMemory, config)
    storage.register_mem_pool_host(HostKVPool(num_pages=4, page_size=4, layer_num=2, is_mla=True, kv_cache_dim=8))
    assert storage.keyspace is not None and storage.keyspace.shards == 0
    assert storage.keyspace.storage_key("k").endswith(".k.pp0of1.cp0of1")


def test_flat_v0_pages_split_too():
    kv, keys = global_kv(2), random_keys(2)
    writer = write_tp(kv, keys[:1], 2, "page_first")
    flat = [storage.mem_pool_host.get_data_page(storage.mem_pool_host.page_size) for storage in writer]
    for storage, page in zip(writer, flat, strict=True):
        assert storage.batch_set_each(keys[1:], [page]) == [True]
    for storage, page in zip(tp_group(SharedMemory, {}, kv, 2, "page_first"), flat, strict=True):
        got = storage.batch_get(keys[1:])
        assert got[0] is not None and torch.equal(got[0].view(torch.uint8), page.view(torch.uint8))
    assert read_hits(kv, keys, 4, "page_head") == [[True, True]] * 4


def test_hybrid_pools_split_kv_like_pools_only():
    from hicache_storage.pools import PoolName, PoolTransfer
    from hicache_storage.testing import attach_hybrid_pools, make_hybrid_pools

    storage = load_backend(SharedMemory, make_config("hybrid", extra_config={"tp_lcm_size": 2}))
    pools = make_hybrid_pools()
    attach_hybrid_pools(storage, pools)
    shards = {name: storage.pool_keyspace(name).shards for name in pools}
    assert shards == {"kv": 2, "swa": 2, "indexer": 0, "mamba": 0}
    assert "tp0of1" in storage.pool_keyspace("mamba").storage_key("k")  # state stays per (tp_size, tp_rank)
    keys = random_keys(2)
    assert storage.batch_set_v1(keys, page_indices(0, 2)) == [True, True]
    swa = PoolTransfer(name=PoolName.SWA, keys=keys, host_indices=page_indices(0, 2))
    assert storage.batch_set_v2([swa]) == {PoolName.SWA: [True, True]}
    assert len([key for key in SHARED if ".h1of2." in key]) == 4  # shard 1 of both pages of kv and swa
    back = PoolTransfer(name=PoolName.SWA, keys=keys, host_indices=page_indices(4, 2))
    assert storage.batch_get_v2([back]) == {PoolName.SWA: [True, True]}
    for slot in range(2):
        assert torch.equal(
            pools["swa"].get_data_page((4 + slot) * 4).view(torch.uint8),
            pools["swa"].get_data_page(slot * 4).view(torch.uint8),
        )


def test_a_pool_without_head_geometry_keeps_whole_pages(caplog):
    class Foreign:
        """A host pool that does not say its heads (only SGLang's required surface)."""

        page_size, size, dtype, layout, size_per_token = 4, 16, "bfloat16", "page_first", 64

    storage = load_backend(SharedMemory, make_config("m", tp_size=2, extra_config={"tp_lcm_size": 4}))
    with caplog.at_level(logging.WARNING, logger="hicache_storage.pools.shard_plan"):
        storage.register_mem_pool_host(Foreign())
    assert storage.keyspace is not None and storage.keyspace.shards == 0
    assert ["does not say its head_num" in record.getMessage() for record in caplog.records] == [True]


def test_sharing_off_warns_once_per_deployment(caplog):
    from hicache_storage.testing import attach_hybrid_pools, make_hybrid_pools

    storage = load_backend(SharedMemory, make_config("hybrid", extra_config={"tp_lcm_size": 4}))
    with caplog.at_level(logging.WARNING, logger="hicache_storage.pools.shard_plan"):
        attach_hybrid_pools(storage, make_hybrid_pools())  # kv and swa: 2 heads, which 4 shards cannot split
    assert [record.getMessage().split(":")[0] for record in caplog.records] == ["pool 'kv'"]
    assert storage.pool_keyspace("swa").shards == 0 and "tp0of1" in storage.pool_keyspace("swa").storage_key("k")
