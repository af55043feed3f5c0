"""multi_pool: sidecar pools (SWA, indexer, Mamba state) beside KV through the v2 calls.

Round trips per pool, the hit policies of ``batch_exists_v2`` (``ALL_PAGES`` gating, ``TRAILING_PAGES``
windows with holes, ``BLOCK_GROUPS`` verdicts), restorable prefixes that really load, pools kept
apart at one page hash, partial writes, faults in the middle of a call and request validation.
Every read is compared byte for byte with the page written.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from hicache_storage import BackendFault, ConfigError, InvalidRequestError, PoolHitPolicy, PoolTransfer
from hicache_storage.state_pool import HostStatePool
from hicache_storage.testing import make_pool as kit_pool

from ..harness import SENTINEL, Harness
from ..hybrid import (
    POOL_SLOTS,
    SIDECARS,
    HybridHandle,
    Verdict,
    all_pages,
    block_groups,
    expected_verdict,
    open_hybrid,
    trailing,
)
from ..side_channel import SideChannelUnavailable
from .faults import CALL_LIMIT_S, FAST_RESILIENCE, RECOVERY_S

T, F = True, False


def _other_geometry(pool: str) -> Any:
    """A host pool for ``pool`` with the same bytes per page but another geometry (a model that differs)."""
    if pool == "swa":  # 2 heads of 8 -> 1 head of 16
        return kit_pool(num_pages=POOL_SLOTS, layer_num=1, head_num=1, head_dim=16, seed=None)
    if pool == "indexer":  # 1 layer of 8 -> 2 layers of 4
        return kit_pool("page_first", True, num_pages=POOL_SLOTS, layer_num=2, kv_cache_dim=4, seed=None)
    return HostStatePool(num_slots=POOL_SLOTS, layer_num=2, temporal_shape=(4, 4), conv_shapes=((3, 4), (2, 4)))


def _verdict_is(hh: HybridHandle, got: Verdict, want: Verdict, what: str) -> None:
    assert got == want or hh.harness.caps.may_evict, (
        f"{what}: batch_exists_v2 answered {got.describe()}; expected {want.describe()}"
    )


def _rejects(call: Callable[[], Any], what: str, error: type[Exception] = InvalidRequestError) -> None:
    try:
        result = call()
    except error:
        return
    except Exception as exc:
        pytest.fail(f"{what} raised {type(exc).__name__} ({exc}); expected {error.__name__}")
    pytest.fail(f"{what} returned {result!r}; expected {error.__name__} before anything moved")


def _pool_of(hh: HybridHandle, storage_key: str) -> str:
    for name in hh.pools:
        if storage_key.startswith(hh.backend.pool_keyspace(name).prefix):
            return name
    raise AssertionError(f"storage key {storage_key!r} belongs to no registered pool")


@contextmanager
def _failing_writes(hh: HybridHandle, doomed: dict[str, Sequence[str]]) -> Iterator[None]:
    """``write_pages`` stores every page but the doomed ones and reports ``False`` for those."""
    skipped = set().union(*(hh.storage_keys(pool, keys) for pool, keys in doomed.items()))

    def write(original: Callable[..., list[bool]], keys: list[str], pages: list[Any], *rest: Any) -> list[bool]:
        keep = [index for index, key in enumerate(keys) if key not in skipped]
        out = [False] * len(keys)
        if keep:
            done = original([keys[i] for i in keep], [pages[i] for i in keep], *rest)
            for index, ok in zip(keep, done):
                out[index] = ok
        return out

    with hh.interpose("write_pages", write):
        yield


@contextmanager
def _faulting(hh: HybridHandle, pool: str, primitives: Sequence[str]) -> Iterator[None]:
    """The named primitives raise a :class:`BackendFault` for ``pool``'s pages (and work for the others)."""

    def fault(original: Callable[..., list[bool]], keys: list[str], *rest: Any) -> list[bool]:
        if keys and _pool_of(hh, keys[0]) == pool:
            raise BackendFault(f"injected fault in pool {pool!r}")
        return original(keys, *rest)

    with ExitStack() as stack:
        for name in primitives:
            stack.enter_context(hh.interpose(name, fault))
        yield


@contextmanager
def _stop_after(hh: HybridHandle, primitive: str, pool: str, errors: list[Exception]) -> Iterator[None]:
    """Stop the server (the test class's hook) right after ``pool``'s ``primitive`` call returns."""

    def stop(original: Callable[..., list[bool]], keys: list[str], *rest: Any) -> list[bool]:
        out = original(keys, *rest)
        if keys and _pool_of(hh, keys[0]) == pool and hh.handle not in hh.harness.stopped:
            try:
                hh.harness.stop_server(hh.handle)
            except SideChannelUnavailable as exc:
                errors.append(exc)
        return out

    with hh.interpose(primitive, stop):
        yield


def _timed(what: str, call: Callable[[], Any]) -> Any:
    begin = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        pytest.fail(f"{what} raised {type(exc).__name__} ({exc}) with the server stopped; a miss or False was due")
    took = time.monotonic() - begin
    assert took <= CALL_LIMIT_S, f"{what} took {took:.1f}s with the server stopped (limit {CALL_LIMIT_S}s)"
    return result


def _recover(hh: HybridHandle, keys: Sequence[str]) -> None:
    hh.harness.start_server(hh.handle)
    deadline = time.monotonic() + RECOVERY_S
    while hh.put({"kv": keys, "mamba": keys}, version=9) != {"kv": [T] * len(keys), "mamba": [T] * len(keys)}:
        assert time.monotonic() < deadline, f"v2 writes did not work again within {RECOVERY_S}s of the restart"
        time.sleep(0.05)


def _miss_or_exact(hh: HybridHandle, pool: str, keys: Sequence[str], versions: Sequence[int], what: str) -> None:
    got = hh.load({pool: list(keys)})[pool]
    for key, page in zip(keys, got):
        assert page is None or page in [hh.content(pool, key, v) for v in versions], (
            f"{what}: pool {pool!r} returned bytes that were never written for its key"
        )


def _staged(hh: HybridHandle, pools: dict[str, list[str]]) -> list[PoolTransfer]:
    transfers = []
    for pool, keys in pools.items():
        slots = list(range(len(keys)))
        for key, slot in zip(keys, slots):
            hh.stage(pool, slot, hh.content(pool, key))
        transfers.append(hh.transfer(pool, keys, slots))
    return transfers


def _nothing_stored(hh: HybridHandle, keys: list[str], pools: Sequence[str], what: str) -> None:
    assert hh.kv_exists(keys) == [F] * len(keys), f"{what}: KV pages were stored"
    for pool in pools:
        if pool != "kv":
            assert hh.load({pool: keys}) == {pool: [None] * len(keys)}, f"{what}: {pool} pages were stored"


class MultiPoolTests:
    """Needs the v2 surface (``register_mem_host_pool_v2``, ``batch_*_v2``) and ``multi_pool``."""

    category = "multi_pool"

    def _hybrid(self, harness: Harness, **options: Any) -> HybridHandle:
        if not harness.target.capabilities.multi_pool:
            pytest.skip("capability multi_pool not declared")
        try:
            hh = open_hybrid(harness, **options)
        except Exception:
            harness.require("multi_pool")  # an instance that declares it off may refuse sidecar pools
            raise
        harness.require("multi_pool")  # read from this instance when it is the test's first
        return hh

    def _hybrid_for_faults(self, harness: Harness) -> HybridHandle:
        extra = {"resilience": FAST_RESILIENCE} if harness.sdk and "resilience" not in harness.options else None
        return self._hybrid(harness, extra=extra)

    # ----------------------------------------------------------------- round trips
    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_round_trip(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(5)
        written = hh.put({pool: (keys, [4, 0, 7, 2, 9]), "kv": (keys, [1, 3, 0, 6, 5])}, version=3)
        assert written == {pool: [T] * 5, "kv": [T] * 5}, f"batch_set_v2 of kv + {pool} failed: {written}"
        got = hh.load({"kv": (keys, [20, 17, 30, 16, 25]), pool: (keys, [31, 18, 16, 27, 20])})
        assert hh.same(got["kv"], hh.expect("kv", keys, 3)), "KV pages read through batch_get_v2 are not byte-exact"
        assert hh.same(got[pool], hh.expect(pool, keys, 3)), f"{pool} pages read back are not byte-exact"
        order = [keys[3], keys[0], keys[3]]
        again = hh.load({pool: order})
        assert hh.same(again[pool], hh.expect(pool, order, 3)), f"{pool} pages read alone, reordered, repeated differ"
        verdict = hh.exists_v2(keys, all_pages(pool))
        _verdict_is(hh, verdict, Verdict(5, {"kv": 5, pool: 5}, [1, 2, 3, 4, 5]), f"kv + {pool} fully written")

    # ----------------------------------------------------------------- hit policies
    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_all_pages_gating(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(6)
        assert hh.put({"kv": keys, pool: keys[:3] + keys[4:]}) == {"kv": [T] * 6, pool: [T] * 5}
        verdict = hh.exists_v2(keys, all_pages(pool))
        _verdict_is(hh, verdict, Verdict(3, {"kv": 6, pool: 3}, [1, 2, 3]), f"{pool} page 3 of 6 missing")
        hh.check_loadable(keys, [all_pages(pool)], verdict)
        got = hh.load({pool: keys[2:5]})[pool]
        assert got[1] is None, f"the {pool} page never written was read as a hit"
        assert hh.same([got[0], got[2]], hh.expect(pool, [keys[2], keys[4]])), "its neighbours did not read back"
        first = harness.keys(3)
        assert hh.put({"kv": first, pool: first[1:]}) == {"kv": [T] * 3, pool: [T] * 2}
        verdict = hh.exists_v2(first, all_pages(pool))
        _verdict_is(hh, verdict, Verdict(0, {"kv": 3}, []), f"{pool} page 0 missing")

    def test_multi_pool_trailing_state_at_node_boundaries(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        boundaries = [keys[2], keys[4], keys[7]]  # state kept where nodes end: prefixes 3, 5 and 8
        assert hh.put({"kv": keys, "mamba": (boundaries, [5, 1, 3])}) == {"kv": [T] * 8, "mamba": [T] * 3}
        window = trailing("mamba", keys[-1:])
        verdict = hh.exists_v2(keys, window)
        _verdict_is(hh, verdict, Verdict(8, {"kv": 8, "mamba": 8}, [3, 5, 8]), "state at pages 2, 4, 7 (window 1)")
        hh.check_loadable(keys, [window], verdict)
        assert hh.load({"mamba": [keys[3], keys[0]]}) == {"mamba": [None, None]}, (
            "state pages never written (prefixes 4 and 1) were read as hits"
        )
        shorter = hh.exists_v2(keys[:7], trailing("mamba", keys[6:7]))
        _verdict_is(hh, shorter, Verdict(5, {"kv": 7, "mamba": 5}, [3, 5]), "the same state, 7 pages asked")

    def test_multi_pool_trailing_window_of_two(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        held = [keys[i] for i in (0, 1, 3, 4, 5, 7)]  # pages 2 and 6 missing
        assert hh.put({"kv": keys, "swa": held}) == {"kv": [T] * 8, "swa": [T] * 6}
        window = trailing("swa", keys[-2:])
        verdict = hh.exists_v2(keys, window)
        _verdict_is(hh, verdict, Verdict(6, {"kv": 8, "swa": 6}, [1, 2, 5, 6]), "swa without pages 2 and 6, window 2")
        hh.check_loadable(keys, [window], verdict)

    def test_multi_pool_pools_fold_together(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        swa = [key for index, key in enumerate(keys) if index != 3]
        written = hh.put({"kv": keys, "indexer": keys[:6], "mamba": [keys[2], keys[4], keys[7]], "swa": swa})
        assert written == {"kv": [T] * 8, "indexer": [T] * 6, "mamba": [T] * 3, "swa": [T] * 7}
        sidecars = [all_pages("indexer"), trailing("mamba", keys[-1:]), trailing("swa", keys[-2:])]
        verdict = hh.exists_v2(keys, *sidecars)
        want = Verdict(3, {"kv": 8, "indexer": 6, "mamba": 8, "swa": 8}, [3])
        _verdict_is(hh, verdict, want, "indexer to page 5, state at 2/4/7, swa without page 3 (window 2)")
        hh.check_loadable(keys, sidecars, verdict)
        cut = harness.keys(4)
        written = hh.put({"kv": cut, "indexer": cut[1:], "mamba": cut})
        assert written == {"kv": [T] * 4, "indexer": [T] * 3, "mamba": [T] * 4}
        verdict = hh.exists_v2(cut, all_pages("indexer"), trailing("mamba", cut[-1:]))
        _verdict_is(hh, verdict, Verdict(0, {"kv": 4}, []), "no prefix left after the indexer: no later verdict")

    def test_multi_pool_block_groups_verdict(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        own = harness.keys(6)  # the pool's own keys: 3 groups of 2, each group covering 3 KV pages
        assert hh.put({"kv": keys, "indexer": own[:5]}) == {"kv": [T] * 8, "indexer": [T] * 5}
        groups = block_groups("indexer", own, block_pages=3, group_pages=2)
        verdict = hh.exists_v2(keys, groups)
        _verdict_is(hh, verdict, Verdict(8, {"kv": 8, "indexer": 6}, list(range(1, 9))), "2 complete groups of 3")
        capped = hh.exists_v2(keys[:4], groups)
        _verdict_is(hh, capped, Verdict(4, {"kv": 4, "indexer": 4}, [1, 2, 3, 4]), "verdict capped at the KV hit")
        absent = hh.exists_v2(keys, block_groups("indexer", harness.keys(4), block_pages=2, group_pages=1))
        _verdict_is(hh, absent, Verdict(8, {"kv": 8}, list(range(1, 9))), "no group present: no verdict, no gating")
        got = hh.load({"indexer": own[:5]})["indexer"]
        assert hh.same(got, hh.expect("indexer", own[:5])), "pages under the pool's own keys are not byte-exact"

    def test_multi_pool_restorable_prefixes_load(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        rng = random.Random(23)
        for scenario in range(4):
            count = 10
            keys = harness.keys(count)
            kv = [rng.random() < 0.95 or index < 4 for index in range(count)]
            flags = {"indexer": 0.9, "mamba": 0.5, "swa": 0.8}
            present = {pool: [rng.random() < p for _ in keys] for pool, p in flags.items()}
            writes = {"kv": [k for k, there in zip(keys, kv) if there]}
            writes.update({pool: [k for k, there in zip(keys, marks) if there] for pool, marks in present.items()})
            written = hh.put(writes, version=scenario)
            assert all(all(oks) for oks in written.values()), f"scenario {scenario}: a write failed: {written}"
            sidecars = [
                all_pages("indexer"),
                trailing("mamba", keys[count - rng.choice([1, 2]) :]),
                trailing("swa", keys[count - rng.choice([1, 2, 3]) :]),
            ]
            rng.shuffle(sidecars)
            verdict = hh.exists_v2(keys, *sidecars)
            want = expected_verdict(kv, [(sidecar, present[sidecar.pool]) for sidecar in sidecars])
            _verdict_is(hh, verdict, want, f"scenario {scenario}")
            hh.check_loadable(keys, sidecars, verdict, version=scenario)

    # ----------------------------------------------------------------- misses and isolation
    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_missing_page_is_never_a_hit(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(4)
        others = [other for other in SIDECARS if other != pool]
        written = hh.put({"kv": keys, **{other: keys for other in others}})
        assert written == {"kv": [T] * 4, **{other: [T] * 4 for other in others}}
        for sidecar in (all_pages(pool), trailing(pool, keys[-1:]), trailing(pool, keys[-3:])):
            verdict = hh.exists_v2(keys, sidecar)
            assert verdict.restorable == [] and pool not in verdict.hits, (
                f"{pool} holds no page, yet batch_exists_v2 with {sidecar.policy.value} answered {verdict.describe()}"
            )
        assert hh.load({pool: keys}) == {pool: [None] * 4}, f"{pool} pages never written were read as hits"
        assert hh.put({pool: keys[1:2]}) == {pool: [T]}
        verdict = hh.exists_v2(keys, trailing(pool, keys[-1:]))
        _verdict_is(hh, verdict, Verdict(2, {"kv": 4, pool: 2}, [2]), f"{pool} holds page 1 only (window 1)")
        got = hh.load({pool: keys})[pool]
        assert got[0] is None and got[2] is None and got[3] is None, f"{pool} pages never written were read as hits"

    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_same_hash_isolated(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        key, other = harness.keys(2)
        assert hh.put({pool: [key]}, version=1) == {pool: [T]}
        assert hh.kv_exists([key]) == [False], f"a {pool} page made the KV page of its hash exist"
        assert hh.exists_v2([key], all_pages(pool)) == Verdict(0, {}, []), (
            f"a {pool} page alone made its hash restorable"
        )
        assert hh.load({"kv": [key]}) == {"kv": [None]}, f"the KV page of a hash only {pool} holds was read as a hit"
        for sibling in (name for name in SIDECARS if name != pool):
            assert hh.load({sibling: [key]}) == {sibling: [None]}, f"a {pool} page was read as a {sibling} page"
        assert hh.put({"kv": [key, other]}, version=2) == {"kv": [T, T]}
        got = hh.load({"kv": [key], pool: [key, other]})
        assert hh.same(got["kv"], [hh.content("kv", key, 2)]), f"KV and {pool} pages of one hash mixed their bytes"
        assert hh.same(got[pool][:1], [hh.content(pool, key, 1)]), f"writing the KV page changed the {pool} page"
        assert got[pool][1] is None, f"the {pool} page of a hash only KV holds was read as a hit"
        verdict = hh.exists_v2([other], all_pages(pool))
        assert verdict.restorable == [] and pool not in verdict.hits, (
            f"a KV page made the {pool} page of its hash exist: {verdict.describe()}"
        )

    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_sidecar_geometry_isolation(self, harness: Harness, pool: str) -> None:
        writer = self._hybrid(harness)
        keys = harness.keys(3)
        assert writer.put({"kv": keys, pool: keys}) == {"kv": [T] * 3, pool: [T] * 3}
        twin = open_hybrid(harness, config=writer.config)
        seen = twin.load({"kv": keys[:1], pool: keys[:1]})
        if seen != {"kv": writer.expect("kv", keys[:1]), pool: writer.expect(pool, keys[:1])}:
            pytest.skip(
                "a second instance on the same config does not see the first one's pages; isolation is unobservable"
            )
        variant = _other_geometry(pool)
        reader = open_hybrid(harness, config=writer.config, replace={pool: variant})
        assert reader.page_bytes(pool) == writer.page_bytes(pool)  # only the geometry differs, not the size
        assert reader.load({pool: keys}) == {pool: [None] * 3}, (
            f"a deployment whose {pool} pool has another geometry (same bytes per page) read the writer's {pool} pages"
        )
        verdict = reader.exists_v2(keys, all_pages(pool))
        assert verdict.restorable == [] and pool not in verdict.hits, (
            f"a deployment whose {pool} pool has another geometry sees the writer's {pool} pages: {verdict.describe()}"
        )

    # ----------------------------------------------------------------- partial writes and faults
    def test_multi_pool_partial_write(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid(harness)
        keys = harness.keys(5)
        with _failing_writes(hh, {"kv": [keys[2]], "mamba": [keys[1]], "swa": [keys[4]]}):
            written = hh.put({"kv": keys, "mamba": keys, "swa": keys})
        assert written == {"kv": [T, T, F, T, T], "mamba": [T, F, T, T, T], "swa": [T, T, T, T, F]}, (
            f"batch_set_v2 must report each page that was not stored as False: {written}"
        )
        assert hh.kv_exists(keys) == [T, T, F, T, T], "KV existence does not match what was written"
        sidecars = [all_pages("swa"), trailing("mamba", keys[-1:])]
        verdict = hh.exists_v2(keys, *sidecars)
        _verdict_is(hh, verdict, Verdict(1, {"kv": 2, "swa": 2, "mamba": 1}, [1]), "pages kv/2, mamba/1, swa/4 missing")
        hh.check_loadable(keys, sidecars, verdict)
        got = hh.load({"kv": keys, "mamba": keys, "swa": keys})
        for pool, flags in written.items():
            want = [content if ok else None for content, ok in zip(hh.expect(pool, keys), flags)]
            assert hh.same(got[pool], want), f"pool {pool!r} does not read back exactly what was written"

    def test_multi_pool_fault_in_one_pool(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid(harness)
        keys = harness.keys(4)
        with _faulting(hh, "indexer", ["write_pages"]):
            written = hh.put({"kv": keys, "indexer": keys, "mamba": keys})
        assert written == {"kv": [T] * 4, "indexer": [F] * 4, "mamba": [T] * 4}, (
            f"a fault while writing the indexer must fail exactly its pages: {written}"
        )
        _verdict_is(hh, hh.exists_v2(keys, all_pages("indexer")), Verdict(0, {"kv": 4}, []), "indexer never stored")
        assert hh.put({"indexer": keys}) == {"indexer": [T] * 4}
        with _faulting(hh, "indexer", ["read_pages", "pages_exist"]):
            got = hh.load({"kv": keys, "indexer": keys, "mamba": keys})
            verdict = hh.exists_v2(keys, trailing("mamba", keys[-1:]), all_pages("indexer"))
        assert got["indexer"] == [None] * 4, "a faulted read returned pages"
        assert hh.same(got["kv"], hh.expect("kv", keys)) and hh.same(got["mamba"], hh.expect("mamba", keys)), (
            "a fault in one pool spoiled the other pools' reads"
        )
        assert verdict.kv_hit_pages == 0 and verdict.restorable == [] and "indexer" not in verdict.hits, (
            f"an indexer that cannot be checked must not be restorable: {verdict.describe()}"
        )
        whole = hh.exists_v2(keys, trailing("mamba", keys[-1:]), all_pages("indexer"))
        _verdict_is(hh, whole, Verdict(4, {"kv": 4, "mamba": 4, "indexer": 4}, [1, 2, 3, 4]), "after the fault")

    def test_multi_pool_server_stopped(self, harness: Harness) -> None:
        hh = self._hybrid_for_faults(harness)
        keys, fresh = harness.keys(3), harness.keys(3)
        assert hh.put({"kv": keys, "mamba": keys}) == {"kv": [T] * 3, "mamba": [T] * 3}
        try:
            harness.stop_server(hh.handle)
        except SideChannelUnavailable as exc:
            pytest.skip(f"no way to stop the server: {exc}")
        written = _timed("batch_set_v2", lambda: hh.put({"kv": fresh, "swa": fresh}, version=1))
        assert written == {"kv": [F] * 3, "swa": [F] * 3}, f"batch_set_v2 with the server stopped answered {written}"
        got = _timed("batch_get_v2", lambda: hh.load({"kv": keys, "mamba": keys}))
        assert got == {"kv": [None] * 3, "mamba": [None] * 3}, "batch_get_v2 with the server stopped read pages"
        verdict = _timed("batch_exists_v2", lambda: hh.exists_v2(keys, all_pages("mamba")))
        assert verdict.kv_hit_pages == 0 and verdict.restorable == [], (
            f"batch_exists_v2 with the server stopped answered {verdict.describe()}"
        )
        _recover(hh, keys)
        _miss_or_exact(hh, "kv", fresh, [1], "a write that failed while the server was stopped")
        _miss_or_exact(hh, "swa", fresh, [1], "a write that failed while the server was stopped")

    def test_multi_pool_fault_between_pools(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid_for_faults(harness)
        keys = harness.keys(4)
        errors: list[Exception] = []
        with _stop_after(hh, "write_pages", "kv", errors):
            written = hh.put({"kv": keys, "mamba": keys, "swa": keys})
        if errors:
            pytest.skip(f"no way to stop the server: {errors[0]}")
        assert written == {"kv": [T] * 4, "mamba": [F] * 4, "swa": [F] * 4}, (
            f"the server stopped after the KV pages: the sidecars' pages must be False: {written}"
        )
        _recover(hh, harness.keys(1))
        for pool in ("kv", "mamba", "swa"):  # a server may come back empty; what it has must be exact
            _miss_or_exact(hh, pool, keys, [0], "a page of a v2 write cut short by a fault")
        hh.check_loadable(keys, [all_pages("swa")], hh.exists_v2(keys, all_pages("swa")))
        assert hh.put({"kv": keys, "mamba": keys, "swa": keys}, version=1) == {pool: [T] * 4 for pool in written}
        with _stop_after(hh, "read_pages", "kv", errors):
            got = hh.load({"kv": keys, "mamba": keys, "swa": keys})
        assert hh.same(got["kv"], hh.expect("kv", keys, 1)), "KV pages read before the fault are not byte-exact"
        assert got["mamba"] == [None] * 4 and got["swa"] == [None] * 4, "pages read with the server stopped"
        _recover(hh, harness.keys(1))
        assert hh.put({"kv": keys, "swa": keys}, version=2) == {"kv": [T] * 4, "swa": [T] * 4}
        with _stop_after(hh, "pages_exist", "kv", errors):
            verdict = hh.exists_v2(keys, all_pages("swa"))
        assert verdict.kv_hit_pages == 0 and verdict.restorable == [] and "swa" not in verdict.hits, (
            f"sidecar pages unreachable after the KV check must not count: {verdict.describe()}"
        )
        _recover(hh, harness.keys(1))

    # ----------------------------------------------------------------- bad input
    def test_multi_pool_bad_input_unknown_pool(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        keys, kept = harness.keys(2), harness.keys(2)
        stray = PoolTransfer(name="no_such_pool", host_indices=hh.indices("kv", [2, 3]), keys=list(keys))
        transfers = _staged(hh, {"kv": keys, "mamba": keys})
        _rejects(lambda: hh.backend.batch_set_v2([*transfers, stray]), "batch_set_v2 naming an unknown pool")
        _nothing_stored(hh, keys, ["kv", "mamba"], "batch_set_v2 naming an unknown pool")
        assert hh.put({"kv": kept, "mamba": kept}) == {"kv": [T, T], "mamba": [T, T]}
        fill = bytes([SENTINEL]) * hh.page_bytes("kv")
        for slot in (20, 21):
            hh.stage("kv", slot, fill)
        reads = [hh.transfer("kv", kept, [20, 21]), stray]
        _rejects(lambda: hh.backend.batch_get_v2(reads), "batch_get_v2 naming an unknown pool")
        assert [hh.slot_bytes("kv", slot) for slot in (20, 21)] == [fill, fill], (
            "batch_get_v2 naming an unknown pool wrote host slots before rejecting the call"
        )
        query = [PoolTransfer(name="no_such_pool", keys=list(kept), hit_policy=PoolHitPolicy.ALL_PAGES)]
        _rejects(lambda: hh.backend.batch_exists_v2(list(kept), query), "batch_exists_v2 naming an unknown pool")

    @pytest.mark.parametrize("bad", ["first", "second"])
    def test_multi_pool_bad_input_length_mismatch(self, harness: Harness, bad: str) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        keys = harness.keys(3)
        transfers = _staged(hh, {"kv": keys, "mamba": keys})
        index = 0 if bad == "first" else 1
        pool = transfers[index].name
        short = PoolTransfer(name=pool, host_indices=hh.indices(pool, [0, 1]), keys=list(keys))  # a page short
        broken = list(transfers)
        broken[index] = short
        _rejects(lambda: hh.backend.batch_set_v2(broken), f"batch_set_v2 with {pool}'s host_indices a page short")
        _nothing_stored(hh, keys, ["kv", "mamba"], f"batch_set_v2 with a bad {bad} transfer")
        assert hh.put({"kv": keys, "mamba": keys}) == {"kv": [T] * 3, "mamba": [T] * 3}
        fills = {name: bytes([SENTINEL]) * hh.page_bytes(name) for name in ("kv", "mamba")}
        for name, fill in fills.items():
            for slot in (20, 21, 22):
                hh.stage(name, slot, fill)
        reads = [hh.transfer("kv", keys, [20, 21, 22]), hh.transfer("mamba", keys, [20, 21, 22])]
        reads[index] = PoolTransfer(name=pool, host_indices=hh.indices(pool, [20, 21, 22, 23]), keys=list(keys))
        _rejects(lambda: hh.backend.batch_get_v2(reads), f"batch_get_v2 with {pool}'s host_indices a page long")
        for name, fill in fills.items():
            assert all(hh.slot_bytes(name, slot) == fill for slot in (20, 21, 22)), (
                f"a rejected batch_get_v2 wrote {name} host slots"
            )

    def test_multi_pool_bad_input_before_pools_registered(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness, finish=False)
        keys = harness.keys(2)
        transfers = _staged(hh, {"kv": keys, "mamba": keys})
        _rejects(lambda: hh.backend.batch_set_v2(transfers), "batch_set_v2 before on_host_pools_registered()")
        staged = {name: [hh.slot_bytes(name, slot) for slot in (0, 1)] for name in ("kv", "mamba")}
        _rejects(lambda: hh.backend.batch_get_v2(transfers), "batch_get_v2 before on_host_pools_registered()")
        assert {name: [hh.slot_bytes(name, slot) for slot in (0, 1)] for name in staged} == staged, (
            "a rejected batch_get_v2 wrote host slots"
        )
        _rejects(
            lambda: hh.backend.batch_exists_v2(list(keys), [all_pages("mamba").transfer()]),
            "batch_exists_v2 before on_host_pools_registered()",
        )
        hh.backend.on_host_pools_registered()
        _nothing_stored(hh, keys, ["kv", "mamba"], "v2 calls rejected before on_host_pools_registered()")
        assert hh.put({"kv": keys, "mamba": keys}) == {"kv": [T, T], "mamba": [T, T]}

    def test_multi_pool_bad_input_pool_registered_twice(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        backend = hh.backend
        _rejects(
            lambda: backend.register_mem_host_pool_v2(_other_geometry("mamba"), "mamba"),
            "registering 'mamba' again with another geometry",
            ConfigError,
        )
        _rejects(
            lambda: backend.register_mem_host_pool_v2(hh.pools["indexer"], "swa"),
            "registering 'swa' again with the indexer's geometry",
            ConfigError,
        )
        backend.register_mem_host_pool_v2(hh.pools["mamba"], "mamba")  # the same pool again: no-op
        keys = harness.keys(2)
        assert hh.put({"mamba": keys, "swa": keys}) == {"mamba": [T, T], "swa": [T, T]}
        got = hh.load({"mamba": keys, "swa": keys})
        assert got == {"mamba": hh.expect("mamba", keys), "swa": hh.expect("swa", keys)}, (
            "after a rejected registration the pools no longer round-trip with their own geometry"
        )
