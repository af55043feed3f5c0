"""The caller API's rules, checked through the in-memory reference backend."""

from collections.abc import Sequence

import pytest
import torch
from core_support import MemoryBackend, memory_of, page_indices

from hicache_storage import (
    BackendFault,
    ConfigError,
    HiCacheStorage,
    HostKVPool,
    InvalidKeyError,
    InvalidRequestError,
    UnsupportedOperation,
    make_config,
)
from hicache_storage.plugin import raw_baseline_for


def pages_equal(pool: HostKVPool, a: int, b: int) -> bool:
    return torch.equal(
        pool.get_data_page(a * pool.page_size).view(torch.uint8),
        pool.get_data_page(b * pool.page_size).view(torch.uint8),
    )


def test_v1_round_trip_and_per_key_results(backend, pool):
    assert backend.batch_set_v1(["k0", "k1"], page_indices(0, 1)) == [True, True]
    assert backend.batch_get_v1(["k1", "missing", "k0"], page_indices(10, 11, 12)) == [True, False, True]
    assert pages_equal(pool, 10, 1) and pages_equal(pool, 12, 0)


@pytest.mark.parametrize(
    "form",
    [
        lambda t: t,  # what SGLang passes: a flat int64 CPU tensor
        lambda t: t.to(torch.int32),
        lambda t: t.view(2, -1),
        lambda t: torch.stack([t, t]).t().reshape(-1)[::2],  # not contiguous
        lambda t: t.tolist(),
        lambda t: t.numpy(),
    ],
)
def test_host_indices_in_any_integer_form_address_the_same_slots(backend, pool, form):
    assert backend.batch_set_v1(["k0", "k1"], form(page_indices(0, 1))) == [True, True]
    assert backend.batch_get_v1(["k1", "k0"], form(page_indices(10, 11))) == [True, True]
    assert pages_equal(pool, 10, 1) and pages_equal(pool, 11, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_host_indices_that_are_not_integers_are_refused(backend, dtype):
    with pytest.raises(InvalidRequestError, match="must hold integer slot indices"):
        backend.batch_set_v1(["k0"], page_indices(0).to(dtype))


def test_batch_exists_is_leading_run_and_each_is_per_key(backend):
    backend.batch_set_v1(["a", "c"], page_indices(0, 1))
    assert backend.batch_exists(["a", "b", "c"]) == 1
    assert backend.batch_exists_each(["a", "b", "c"]) == [True, False, True]
    assert backend.batch_exists(["b", "a"]) == 0
    assert backend.exists("c") and not backend.exists("b")


def test_v0_and_v1_share_pages(backend, pool):
    assert backend.set("flat", pool.get_data_page(8))
    assert backend.batch_get_v1(["flat"], page_indices(20)) == [True]
    assert pages_equal(pool, 20, 2)
    backend.batch_set_v1(["v1"], page_indices(3))
    got = backend.get("v1")
    assert got is not None and torch.equal(got.view(torch.uint8), pool.get_data_page(12).view(torch.uint8))
    assert backend.get("nope") is None
    assert backend.batch_get(["v1", "nope"])[1] is None
    target = pool.get_dummy_flat_data_page()
    assert backend.get("v1", target) is target


def test_empty_batches(backend):
    assert backend.batch_set_v1([], page_indices()) == []
    assert backend.batch_get_v1([], page_indices()) == []
    assert backend.batch_exists([]) == 0
    assert backend.batch_exists_each([]) == []
    assert backend.batch_get([]) == []


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda b: b.batch_set_v1(["a", "b"], page_indices(0)), "host_indices has 4 entries"),
        (lambda b: b.batch_set_v1([""], page_indices(0)), "non-empty"),
        (lambda b: b.batch_set_v1([3], page_indices(0)), "must be a str"),
        (lambda b: b.batch_set_v1(["../etc"], page_indices(0)), "outside"),
        (lambda b: b.batch_set_v1("abc", page_indices(0)), "list of str"),
        (lambda b: b.batch_set_v1(["a"], torch.tensor([1, 2, 3, 4])), "multiple of page_size"),
        (lambda b: b.batch_set_v1(["a"], torch.tensor([0, 1, 3, 2])), "consecutive"),
        (lambda b: b.batch_set_v1(["a"], torch.arange(1000, 1004)), "inside the pool"),
        (lambda b: b.set("a", torch.zeros(3)), "holds 12 bytes"),
        (lambda b: b.batch_set(["a", "b"], [torch.zeros(3)]), "1 entries for 2 keys"),
        (lambda b: b.set("a", "not a tensor"), "torch.Tensor"),
    ],
)
def test_invalid_requests_raise_value_error_and_store_nothing(backend, call, error):
    backend.batch_set_v1(["keep"], page_indices(5))
    before = dict(memory_of(backend).records)
    with pytest.raises(ValueError, match=error):
        call(backend)
    assert memory_of(backend).records == before


def test_key_errors_are_invalid_key_errors(backend):
    with pytest.raises(InvalidKeyError):
        backend.batch_exists(["a b"])
    assert issubclass(InvalidKeyError, InvalidRequestError)


def test_calls_before_pool_registration_fail_clearly():
    b = HiCacheStorage(MemoryBackend, make_config())
    with pytest.raises(InvalidRequestError, match="register_mem_pool_host"):
        b.batch_exists(["a"])


def test_batches_are_split_at_max_batch_size(backend):
    keys = [f"k{i}" for i in range(40)]
    backend.batch_set_v1(keys, page_indices(*range(40)))
    assert [n for op, n in memory_of(backend).primitive_calls if op == "write"] == [16, 16, 8]
    assert backend.batch_exists(keys) == 40


class Faulty(MemoryBackend):
    def __init__(self, setup):
        super().__init__(setup)
        self.broken = True

    def read_pages(self, keys: Sequence[str], pages, context):
        if self.broken:
            raise BackendFault("connection refused")
        return super().read_pages(keys, pages, context)

    def pages_exist(self, keys, context):
        if self.broken:
            raise ConnectionError("reset by peer")
        return super().pages_exist(keys, context)

    def write_pages(self, keys, pages, context):
        if self.broken:
            raise TimeoutError("timed out")
        return super().write_pages(keys, pages, context)


def test_faults_become_misses_and_are_counted(pool):
    b = HiCacheStorage(Faulty, make_config(extra_config={"resilience": False}))
    b.register_mem_pool_host(pool)
    assert b.batch_set_v1(["a"], page_indices(0)) == [False]
    assert b.batch_get_v1(["a"], page_indices(1)) == [False]
    assert b.batch_exists(["a"]) == 0
    assert b.get("a") is None
    assert b.batch_set(["a"], [pool.get_data_page(0)]) is False
    stats = b.get_stats()
    assert stats["faults"] == 5
    assert "reset by peer" in stats["last_fault"] or "timed out" in stats["last_fault"]
    b.backend.broken = False
    assert b.batch_set_v1(["a"], page_indices(0)) == [True]


class WrongLength(MemoryBackend):
    def pages_exist(self, keys, context):
        return [True]


def test_primitive_returning_wrong_shape_is_a_counted_fault(pool):
    b = HiCacheStorage(WrongLength, make_config(extra_config={"resilience": False}))
    b.register_mem_pool_host(pool)
    assert b.batch_exists_each(["a", "b"]) == [False, False]
    assert b.get_stats()["counters"]["contract_violations"] == 1


def test_delete_and_clear(backend):
    backend.batch_set_v1(["a", "b"], page_indices(0, 1))
    assert backend.delete(["a"]) == [True]
    assert backend.batch_exists_each(["a", "b"]) == [False, True]
    backend.clear()
    assert backend.batch_exists_each(["b"]) == [False]


class NoDelete(MemoryBackend):
    capabilities = MemoryBackend.capabilities.with_overrides({"supports_delete": False, "supports_clear": False})


def test_delete_without_capability_is_refused(pool):
    b = HiCacheStorage(NoDelete, make_config())
    b.register_mem_pool_host(pool)
    with pytest.raises(UnsupportedOperation):
        b.delete(["a"])
    with pytest.raises(UnsupportedOperation):
        b.clear()


def test_close_is_idempotent_and_context_manager_closes(pool):
    with HiCacheStorage(MemoryBackend, make_config()) as b:
        b.register_mem_pool_host(pool)
    assert b.closed
    b.close()
    with pytest.raises(InvalidRequestError, match="closed"):
        b.batch_exists(["a"])


def test_unknown_option_names_the_option():
    with pytest.raises(ConfigError, match=r"extra_config\.colour: unknown option"):
        HiCacheStorage(MemoryBackend, make_config(extra_config={"colour": "red"}))


def test_too_large_pages_are_refused_at_registration(pool):
    class Small(MemoryBackend):
        capabilities = MemoryBackend.capabilities.with_overrides({"max_page_bytes": 16})

    with pytest.raises(ConfigError, match="max_page_bytes=16"):
        HiCacheStorage(Small, make_config()).register_mem_pool_host(pool)


def test_isolation_by_config(pool):
    shared: dict[str, bytes] = {}

    def make(**kw):
        b = HiCacheStorage(MemoryBackend, make_config(**kw))
        memory_of(b).records = shared
        b.register_mem_pool_host(pool)
        return b

    writer = make(tp_rank=0, tp_size=2)
    writer.batch_set_v1(["a"], page_indices(0))
    assert make(tp_rank=1, tp_size=2).batch_exists(["a"]) == 0
    assert make(tp_rank=0, tp_size=2, extra_config={"namespace": "t"}).batch_exists(["a"]) == 0
    assert make(tp_rank=0, tp_size=2).batch_exists(["a"]) == 1
    mla0 = make(tp_rank=0, tp_size=2, is_mla_model=True)
    mla0.batch_set_v1(["m"], page_indices(1))
    assert make(tp_rank=1, tp_size=2, is_mla_model=True).batch_exists(["m"]) == 1


def test_options_and_timeout_reach_the_backend_and_its_raw_baseline() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Opts:
        size: int = 1

    seen: list[tuple[Opts, float]] = []

    class Raw:
        @classmethod
        def from_options(cls, options: Opts, timeout_s: float) -> tuple[Opts, float]:
            return options, timeout_s

    class WithOptions(MemoryBackend):
        Options = Opts
        raw_baseline_class = Raw  # type: ignore[assignment]

        def __init__(self, setup):
            super().__init__(setup)
            seen.append((setup.options, setup.io_timeout_s))

    config = make_config("m", extra_config={"size": 7, "namespace": "n", "resilience": {"deadline_s": 2.5}})
    instance = HiCacheStorage(WithOptions, config)
    assert seen == [(Opts(size=7), 2.5)] and instance.options == Opts(size=7) and instance.settings.io_timeout_s == 2.5
    assert raw_baseline_for(WithOptions, config) == (Opts(size=7), 2.5)
    assert raw_baseline_for(WithOptions, make_config("m"))[1] == 5.0  # type: ignore[index]
    assert HiCacheStorage(WithOptions, config, resilience=False).settings.io_timeout_s == 5.0
    with pytest.raises(ConfigError, match=r"extra_config\.size"):
        raw_baseline_for(WithOptions, make_config("m", extra_config={"size": "big"}))
    assert raw_baseline_for(MemoryBackend, config) is None
