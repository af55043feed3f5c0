"""Tests of what is the sim backend's own: record format, cost model, seeded faults, capacity, named stores.

Round trips, per-key existence, outages, sharing, delete, clear and concurrency are the conformance
suite's (``test_conformance.py``: a private store, a shared named store and a capacity-bound one).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import torch
from hicache_storage_sim import RawStore, SimBackend
from hicache_storage_sim.conformance import SimHooks

from hicache_storage import BackendFault, ConfigError, HiCacheStorage, HostKVPool, load_backend, make_config
from hicache_storage import testing as kit
from hicache_storage.plugin.page_format import HEADER_SIZE, PageRecordError, parse_header

LAYOUTS = ["layer_first", "page_first", "page_first_direct"]
DTYPES = ["bfloat16", "float16", "float8_e4m3fn"]
PAGE_SIZE = 4
MiB = 1 << 20


def keys_for(count: int, salt: str = "") -> list[str]:
    """The same ``count`` and ``salt`` give the same keys."""
    return kit.random_keys(count, salt)


def make_pool(
    *, is_mla: bool = False, layout: str = "page_first", dtype: str = "bfloat16", num_pages: int = 8
) -> HostKVPool:
    return kit.make_pool(layout, is_mla, num_pages, dtype=dtype)


def make_backend(pool: HostKVPool | None = None, **options: Any) -> HiCacheStorage:
    return kit.make_backend(SimBackend, {"resilience": False, **options}, pool if pool is not None else make_pool())


def sim_of(storage: HiCacheStorage) -> SimBackend:
    """The sim backend a storage instance holds."""
    backend = storage.backend
    assert isinstance(backend, SimBackend)
    return backend


def raw_store(storage: HiCacheStorage) -> RawStore:
    """The stored records behind ``storage``, through the sim backend's conformance hooks."""
    return SimHooks().raw_store(sim_of(storage))


indices = kit.page_indices
page_bytes = kit.page_bytes


@pytest.fixture
def store_name() -> Any:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    SimBackend.drop_store(name)


def test_v0_and_v1_are_interchangeable() -> None:
    pool = make_pool(layout="layer_first", is_mla=True)
    backend = make_backend(pool)
    v0_keys, v1_keys = keys_for(2, "v0"), keys_for(2, "v1")
    flat = [pool.get_data_page(p * PAGE_SIZE) for p in range(2)]
    assert backend.batch_set(v0_keys, flat) is True
    assert backend.batch_set_v1(v1_keys, indices(0, 2)) == [True, True]
    raw = raw_store(backend)
    space = backend.keyspace
    assert space is not None
    # the same payloads; each header names its own key
    assert [raw[space.storage_key(k)][HEADER_SIZE:] for k in v0_keys] == [
        raw[space.storage_key(k)][HEADER_SIZE:] for k in v1_keys
    ]
    assert backend.batch_get_v1(v0_keys, indices(4, 2)) == [True, True]
    assert [page_bytes(pool, p) for p in (4, 5)] == [page_bytes(pool, p) for p in (0, 1)]
    got = backend.batch_get(v1_keys)
    assert all(t is not None and torch.equal(t.view(torch.uint8), f.view(torch.uint8)) for t, f in zip(got, flat))


# ----------------------------------------------------------------------------- integrity via the side channel
@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r[:-1],
        lambda r: r + b"\0",
        lambda r: r[: HEADER_SIZE + 3] + bytes([r[HEADER_SIZE + 3] ^ 0x80]) + r[HEADER_SIZE + 4 :],
        lambda r: b"NOPE" + r[4:],
        lambda r: r[:HEADER_SIZE],
    ],
    ids=["truncated", "extended", "flipped", "magic", "header-only"],
)
def test_damaged_record_reads_as_miss_and_is_counted(damage: Any) -> None:
    backend = make_backend()
    key = keys_for(1)
    backend.batch_set_v1(key, indices(0, 1))
    assert backend.keyspace is not None
    storage_key = backend.keyspace.storage_key(key[0])
    raw = raw_store(backend)
    length, _digest = parse_header(raw[storage_key])
    assert length == backend.keyspace.page_bytes
    raw[storage_key] = damage(raw[storage_key])
    assert backend.batch_get_v1(key, indices(1, 1)) == [False]
    assert backend.stats.get("integrity_failures") == 1


def test_raw_store_delete_and_listing() -> None:
    backend = make_backend()
    keys = keys_for(2)
    backend.batch_set_v1(keys, indices(0, 2))
    raw = raw_store(backend)
    assert backend.keyspace is not None
    storage_keys = backend.keyspace.storage_keys(keys)
    pages = [key for key in raw if not key.startswith(backend.keyspace.prefix + "_manifest.")]
    assert sorted(pages) == sorted(storage_keys) and len(pages) == 2
    del raw[storage_keys[0]]
    assert backend.batch_exists_each(keys) == [False, True]
    with pytest.raises(KeyError):
        del raw[storage_keys[0]]
    with pytest.raises(PageRecordError):
        parse_header(b"short")


# ----------------------------------------------------------------------------- cost model
def test_modelled_time_formula_is_exact() -> None:
    pool = HostKVPool(num_pages=2, page_size=16, layer_num=16, dtype="bfloat16", head_num=8, head_dim=128)
    assert pool.bytes_per_page == MiB
    backend = load_backend(SimBackend, make_config("m", extra_config={"resilience": False}))
    backend.register_mem_pool_host(pool)
    key = keys_for(1)
    assert backend.batch_set_v1(key, torch.arange(16)) == [True]
    assert sim_of(backend).last_call_seconds == pytest.approx(100e-6 + MiB / 5e9, rel=1e-12)
    backend.batch_exists_each(key)
    assert sim_of(backend).last_call_seconds == pytest.approx(100e-6, rel=1e-12)
    total = 2 * 100e-6 + MiB / 5e9
    assert backend.stats.get("modelled_seconds") == pytest.approx(total, rel=1e-12)
    assert backend.stats.get("modelled_set_seconds") == pytest.approx(100e-6 + MiB / 5e9, rel=1e-12)


def test_read_bandwidth_and_misses_cost_only_latency() -> None:
    pool = HostKVPool(num_pages=2, page_size=16, layer_num=16, dtype="bfloat16", head_num=8, head_dim=128)
    backend = load_backend(
        "sim", make_config("m", extra_config={"sim_write_gbps": 2, "sim_read_gbps": 8.0, "sim_op_latency_us": 50})
    )
    backend.register_mem_pool_host(pool)
    key = keys_for(1)
    backend.batch_set_v1(key, torch.arange(16))
    assert sim_of(backend).last_call_seconds == pytest.approx(50e-6 + MiB / 2e9, rel=1e-12)
    backend.batch_get_v1(key, torch.arange(16, 32))
    assert sim_of(backend).last_call_seconds == pytest.approx(50e-6 + MiB / 8e9, rel=1e-12)
    backend.batch_get_v1(keys_for(1, "absent"), torch.arange(16, 32))
    assert sim_of(backend).last_call_seconds == pytest.approx(50e-6, rel=1e-12)


def test_sleep_really_waits_and_default_does_not() -> None:
    fast = make_backend(sim_op_latency_us=20_000.0)
    begin = time.perf_counter()
    fast.batch_exists_each(keys_for(1))
    assert time.perf_counter() - begin < 0.015
    slow = make_backend(sim_op_latency_us=20_000.0, sleep=True)
    begin = time.perf_counter()
    slow.batch_exists_each(keys_for(1))
    assert time.perf_counter() - begin >= 0.02


# ----------------------------------------------------------------------------- faults and outages
def _fault_pattern(seed: int, calls: int = 40) -> list[bool]:
    backend = make_backend(fail_get_rate=0.3, fault_seed=seed)
    key = keys_for(1)
    backend.batch_set_v1(key, indices(0, 1))
    return [backend.batch_get_v1(key, indices(1, 1))[0] for _ in range(calls)]


def test_fault_injection_is_deterministic_for_a_seed() -> None:
    first, again, other = _fault_pattern(11), _fault_pattern(11), _fault_pattern(12)
    assert first == again
    assert first != other
    assert 0 < first.count(False) < len(first)


def test_injected_faults_are_counted_and_never_raise() -> None:
    backend = make_backend(fail_set_rate=1.0, fail_exists_rate=1.0)
    keys = keys_for(2)
    assert backend.batch_set_v1(keys, indices(0, 2)) == [False, False]
    assert "injected set fault" in (backend.get_stats()["last_fault"] or "")
    assert backend.batch_exists_each(keys) == [False, False]
    stats = backend.get_stats()
    assert stats["ops"]["set"]["faults"] == 1 and stats["ops"]["exists"]["faults"] == 1
    with pytest.raises(BackendFault):  # the primitive itself raises; the caller API turned it into False
        sim_of(backend).write_pages(["k"], [[memoryview(bytearray(4))]], kit.plain_context(4))


# ----------------------------------------------------------------------------- capacity
def test_capacity_evicts_least_recently_used() -> None:
    pool = make_pool()
    backend = make_backend(pool, capacity_bytes=3 * pool.bytes_per_page)
    assert backend.capabilities.may_evict is True
    keys = keys_for(5)
    backend.batch_set_v1(keys[:3], indices(0, 3))
    assert backend.batch_get_v1(keys[:1], indices(5, 1)) == [True]  # key 0 is now most recently used
    backend.batch_set_v1(keys[3:5], indices(3, 2))
    assert backend.batch_exists_each(keys) == [True, False, False, True, True]
    assert backend.stats.get("evictions") == 2
    assert sim_of(backend).used_bytes == 3 * pool.bytes_per_page


def test_page_larger_than_capacity_is_not_stored() -> None:
    pool = make_pool()
    backend = make_backend(pool, capacity_bytes=pool.bytes_per_page - 1)
    assert backend.batch_set_v1(keys_for(1), indices(0, 1)) == [False]
    assert sim_of(backend).used_bytes == 0


def test_without_capacity_nothing_is_evicted() -> None:
    backend = make_backend()
    assert backend.capabilities.may_evict is False
    assert backend.capabilities.verifies_integrity is True


# ----------------------------------------------------------------------------- keys_only
def test_keys_only_serves_zeros_and_does_not_claim_integrity() -> None:
    pool = make_pool()
    backend = make_backend(pool, keys_only=True)
    assert backend.capabilities.verifies_integrity is False
    keys = keys_for(1)
    assert backend.batch_set_v1(keys, indices(0, 1)) == [True]
    assert backend.batch_exists_each(keys) == [True]
    assert backend.batch_get_v1(keys, indices(1, 1)) == [True]
    assert page_bytes(pool, 1) == bytes(pool.bytes_per_page)
    assert sim_of(backend).last_call_seconds == pytest.approx(100e-6 + pool.bytes_per_page / 5e9, rel=1e-12)


# ----------------------------------------------------------------------------- named stores
def test_named_store_is_shared_and_survives_restart(store_name: str) -> None:
    pool = make_pool()
    keys = keys_for(2)
    with make_backend(pool, store=store_name) as first:
        assert first.capabilities.persistent and first.capabilities.shared
        first.batch_set_v1(keys, indices(0, 2))
    second = make_backend(pool, store=store_name)
    assert second.batch_get_v1(keys, indices(2, 2)) == [True, True]
    assert page_bytes(pool, 2) == page_bytes(pool, 0)
    assert make_backend(pool).batch_exists_each(keys) == [False, False]
    private = make_backend(pool)
    assert not private.capabilities.persistent and not private.capabilities.shared


def test_named_store_outage_is_seen_by_every_instance(store_name: str) -> None:
    first, second = make_backend(store=store_name), make_backend(store=store_name)
    SimHooks().stop_server(sim_of(first))
    assert second.batch_exists_each(keys_for(1)) == [False]
    assert second.get_stats()["faults"] == 1


def test_named_store_rejects_conflicting_capacity(store_name: str) -> None:
    make_backend(store=store_name, capacity_bytes=MiB)
    with pytest.raises(ConfigError) as info:
        make_backend(store=store_name)
    assert info.value.option == "extra_config.capacity_bytes"
    with pytest.raises(ConfigError) as info:
        make_backend(store=store_name, capacity_bytes=MiB, keys_only=True)
    assert info.value.option == "extra_config.keys_only"


# ----------------------------------------------------------------------------- options and threads
@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ({"sim_write_gbps": 0}, "extra_config.sim_write_gbps"),
        ({"sim_read_gbps": -1.0}, "extra_config.sim_read_gbps"),
        ({"sim_op_latency_us": -5}, "extra_config.sim_op_latency_us"),
        ({"fail_get_rate": 1.5}, "extra_config.fail_get_rate"),
        ({"fail_set_rate": "often"}, "extra_config.fail_set_rate"),
        ({"capacity_bytes": 0}, "extra_config.capacity_bytes"),
        ({"store": 3}, "extra_config.store"),
        ({"sim_gbps": 5}, "extra_config.sim_gbps"),
    ],
)
def test_bad_options_name_the_option(extra: dict[str, Any], option: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_backend(SimBackend, make_config("m", extra_config=extra))
    assert info.value.option == option
