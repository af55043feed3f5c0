"""multi_pool: sidecar pools (SWA, indexer, Mamba state) beside KV through the v2 calls.

Round trips per pool, the hit policies of ``batch_exists_v2`` (``ALL_PAGES`` gating, ``TRAILING_PAGES``
windows with holes, ``BLOCK_GROUPS`` verdicts), restorable prefixes that really load, pools kept
apart at one page hash, partial writes, faults in the middle of a call and request validation.
Every read is compared byte for byte with the page written.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from hicache_storage import ConfigError, PoolHitPolicy, PoolTransfer

from .. import skips
from ..checks import check, check_equal
from ..harness import SENTINEL, Harness
from ..hybrid import SIDECARS, HybridHandle, Verdict, all_pages, block_groups, expected_verdict, open_hybrid, trailing
from .faults import FAST_RESILIENCE
from .multi_pool_kit import (
    F,
    T,
    failing_writes,
    faulting,
    miss_or_exact,
    nothing_stored,
    other_geometry,
    recover,
    rejects,
    staged,
    stop_after,
    timed,
    verdict_is,
)


class MultiPoolTests:
    """Needs the v2 surface (``register_mem_host_pool_v2``, ``batch_*_v2``) and ``multi_pool``."""

    category = "multi_pool"

    def _hybrid(self, harness: Harness, **options: Any) -> HybridHandle:
        if not harness.target.capabilities.multi_pool:
            harness.skip(skips.CAPABILITY, "capability multi_pool not declared", skips.enable_capability("multi_pool"))
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
        check_equal(written, {pool: [T] * 5, "kv": [T] * 5}, f"batch_set_v2 of kv + {pool}")
        got = hh.load({"kv": (keys, [20, 17, 30, 16, 25]), pool: (keys, [31, 18, 16, 27, 20])})
        hh.check_pages("kv", got["kv"], keys, 3, "KV pages read through batch_get_v2")
        hh.check_pages(pool, got[pool], keys, 3, "sidecar pages read through batch_get_v2")
        order = [keys[3], keys[0], keys[3]]
        again = hh.load({pool: order})
        hh.check_pages(pool, again[pool], order, 3, "sidecar pages read alone, reordered, repeated")
        verdict = hh.exists_v2(keys, all_pages(pool))
        verdict_is(hh, verdict, Verdict(5, {"kv": 5, pool: 5}, [1, 2, 3, 4, 5]), f"kv + {pool} fully written")

    # ----------------------------------------------------------------- hit policies
    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_all_pages_gating(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(6)
        check_equal(
            hh.put({"kv": keys, pool: keys[:3] + keys[4:]}),
            {"kv": [T] * 6, pool: [T] * 5},
            f"batch_set_v2 of kv + {pool} pages",
        )
        verdict = hh.exists_v2(keys, all_pages(pool))
        verdict_is(hh, verdict, Verdict(3, {"kv": 6, pool: 3}, [1, 2, 3]), f"{pool} page 3 of 6 missing")
        hh.check_loadable(keys, [all_pages(pool)], verdict)
        got = hh.load({pool: keys[2:5]})[pool]
        hh.check_pages(pool, got, keys[2:5], [0, None, 0], "a sidecar page never written, between two written")
        first = harness.keys(3)
        check_equal(
            hh.put({"kv": first, pool: first[1:]}), {"kv": [T] * 3, pool: [T] * 2}, f"batch_set_v2 of kv + {pool} pages"
        )
        verdict = hh.exists_v2(first, all_pages(pool))
        verdict_is(hh, verdict, Verdict(0, {"kv": 3}, []), f"{pool} page 0 missing")

    def test_multi_pool_trailing_state_at_node_boundaries(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        boundaries = [keys[2], keys[4], keys[7]]  # state kept where nodes end: prefixes 3, 5 and 8
        check_equal(
            hh.put({"kv": keys, "mamba": (boundaries, [5, 1, 3])}),
            {"kv": [T] * 8, "mamba": [T] * 3},
            "batch_set_v2 of kv + mamba pages",
        )
        window = trailing("mamba", keys[-1:])
        verdict = hh.exists_v2(keys, window)
        verdict_is(hh, verdict, Verdict(8, {"kv": 8, "mamba": 8}, [3, 5, 8]), "state at pages 2, 4, 7 (window 1)")
        hh.check_loadable(keys, [window], verdict)
        hh.check_pages(
            "mamba",
            hh.load({"mamba": [keys[3], keys[0]]})["mamba"],
            [keys[3], keys[0]],
            [None, None],
            "state pages never written (prefixes 4 and 1)",
        )
        shorter = hh.exists_v2(keys[:7], trailing("mamba", keys[6:7]))
        verdict_is(hh, shorter, Verdict(5, {"kv": 7, "mamba": 5}, [3, 5]), "the same state, 7 pages asked")

    def test_multi_pool_trailing_window_of_two(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        held = [keys[i] for i in (0, 1, 3, 4, 5, 7)]  # pages 2 and 6 missing
        check_equal(
            hh.put({"kv": keys, "swa": held}), {"kv": [T] * 8, "swa": [T] * 6}, "batch_set_v2 of kv + swa pages"
        )
        window = trailing("swa", keys[-2:])
        verdict = hh.exists_v2(keys, window)
        verdict_is(hh, verdict, Verdict(6, {"kv": 8, "swa": 6}, [1, 2, 5, 6]), "swa without pages 2 and 6, window 2")
        hh.check_loadable(keys, [window], verdict)

    def test_multi_pool_pools_fold_together(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        swa = [key for index, key in enumerate(keys) if index != 3]
        written = hh.put({"kv": keys, "indexer": keys[:6], "mamba": [keys[2], keys[4], keys[7]], "swa": swa})
        check_equal(
            written, {"kv": [T] * 8, "indexer": [T] * 6, "mamba": [T] * 3, "swa": [T] * 7}, "batch_set_v2 of 4 pools"
        )
        sidecars = [all_pages("indexer"), trailing("mamba", keys[-1:]), trailing("swa", keys[-2:])]
        verdict = hh.exists_v2(keys, *sidecars)
        want = Verdict(3, {"kv": 8, "indexer": 6, "mamba": 8, "swa": 8}, [3])
        verdict_is(hh, verdict, want, "indexer to page 5, state at 2/4/7, swa without page 3 (window 2)")
        hh.check_loadable(keys, sidecars, verdict)
        cut = harness.keys(4)
        written = hh.put({"kv": cut, "indexer": cut[1:], "mamba": cut})
        check_equal(written, {"kv": [T] * 4, "indexer": [T] * 3, "mamba": [T] * 4}, "batch_set_v2 of 3 pools")
        verdict = hh.exists_v2(cut, all_pages("indexer"), trailing("mamba", cut[-1:]))
        verdict_is(hh, verdict, Verdict(0, {"kv": 4}, []), "no prefix left after the indexer: no later verdict")

    def test_multi_pool_block_groups_verdict(self, harness: Harness) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(8)
        own = harness.keys(6)  # the pool's own keys: 3 groups of 2, each group covering 3 KV pages
        check_equal(
            hh.put({"kv": keys, "indexer": own[:5]}),
            {"kv": [T] * 8, "indexer": [T] * 5},
            "batch_set_v2 of kv + indexer pages",
        )
        groups = block_groups("indexer", own, block_pages=3, group_pages=2)
        verdict = hh.exists_v2(keys, groups)
        verdict_is(hh, verdict, Verdict(8, {"kv": 8, "indexer": 6}, list(range(1, 9))), "2 complete groups of 3")
        capped = hh.exists_v2(keys[:4], groups)
        verdict_is(hh, capped, Verdict(4, {"kv": 4, "indexer": 4}, [1, 2, 3, 4]), "verdict capped at the KV hit")
        absent = hh.exists_v2(keys, block_groups("indexer", harness.keys(4), block_pages=2, group_pages=1))
        verdict_is(hh, absent, Verdict(8, {"kv": 8}, list(range(1, 9))), "no group present: no verdict, no gating")
        got = hh.load({"indexer": own[:5]})["indexer"]
        hh.check_pages("indexer", got, own[:5], 0, "pages under the pool's own keys")

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
            check(
                all(all(oks) for oks in written.values()),
                f"scenario {scenario}: batch_set_v2",
                "every page True",
                written,
            )
            sidecars = [
                all_pages("indexer"),
                trailing("mamba", keys[count - rng.choice([1, 2]) :]),
                trailing("swa", keys[count - rng.choice([1, 2, 3]) :]),
            ]
            rng.shuffle(sidecars)
            verdict = hh.exists_v2(keys, *sidecars)
            want = expected_verdict(kv, [(sidecar, present[sidecar.pool]) for sidecar in sidecars])
            verdict_is(hh, verdict, want, f"scenario {scenario}")
            hh.check_loadable(keys, sidecars, verdict, version=scenario)

    # ----------------------------------------------------------------- misses and isolation
    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_missing_page_is_never_a_hit(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        keys = harness.keys(4)
        others = [other for other in SIDECARS if other != pool]
        written = hh.put({"kv": keys, **{other: keys for other in others}})
        check_equal(written, {"kv": [T] * 4, **{other: [T] * 4 for other in others}}, "batch_set_v2 of kv + the others")
        for sidecar in (all_pages(pool), trailing(pool, keys[-1:]), trailing(pool, keys[-3:])):
            verdict = hh.exists_v2(keys, sidecar)
            check(
                verdict.restorable == [] and pool not in verdict.hits,
                f"batch_exists_v2 with {sidecar.policy.value} where {pool} holds no page",
                f"no restorable prefix and no verdict for {pool}",
                verdict.describe(),
            )
        hh.check_pages(pool, hh.load({pool: keys})[pool], keys, [None] * 4, f"{pool} pages never written")
        check_equal(hh.put({pool: keys[1:2]}), {pool: [T]}, f"batch_set_v2 of {pool} page 1")
        verdict = hh.exists_v2(keys, trailing(pool, keys[-1:]))
        verdict_is(hh, verdict, Verdict(2, {"kv": 4, pool: 2}, [2]), f"{pool} holds page 1 only (window 1)")
        got = hh.load({pool: keys})[pool]
        hh.check_pages(pool, got, keys, [None, 0, None, None], "sidecar pages where only page 1 was written")

    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_same_hash_isolated(self, harness: Harness, pool: str) -> None:
        hh = self._hybrid(harness)
        key, other = harness.keys(2)
        check_equal(hh.put({pool: [key]}, version=1), {pool: [T]}, f"batch_set_v2 of one {pool} page")
        check_equal(hh.kv_exists([key]), [False], f"exists of the KV page of a hash only {pool} holds")
        check_equal(
            hh.exists_v2([key], all_pages(pool)), Verdict(0, {}, []), f"batch_exists_v2 of a hash only {pool} holds"
        )
        hh.check_pages("kv", hh.load({"kv": [key]})["kv"], [key], [None], f"the KV page of a hash only {pool} holds")
        for sibling in (name for name in SIDECARS if name != pool):
            hh.check_pages(
                sibling,
                hh.load({sibling: [key]})[sibling],
                [key],
                [None],
                f"the {sibling} page of a hash only {pool} holds",
            )
        check_equal(hh.put({"kv": [key, other]}, version=2), {"kv": [T, T]}, "batch_set_v2 of kv pages (version 2)")
        got = hh.load({"kv": [key], pool: [key, other]})
        hh.check_pages("kv", got["kv"], [key], 2, "the KV page of a hash the sidecar holds too")
        hh.check_pages(
            pool, got[pool], [key, other], [1, None], "sidecar pages of hashes KV holds (1 also in the sidecar)"
        )
        verdict = hh.exists_v2([other], all_pages(pool))
        check(
            verdict.restorable == [] and pool not in verdict.hits,
            f"batch_exists_v2 of a hash only KV holds, gated on {pool}",
            "no restorable prefix",
            verdict.describe(),
        )

    @pytest.mark.parametrize("pool", SIDECARS)
    def test_multi_pool_sidecar_geometry_isolation(self, harness: Harness, pool: str) -> None:
        writer = self._hybrid(harness)
        keys = harness.keys(3)
        check_equal(
            writer.put({"kv": keys, pool: keys}), {"kv": [T] * 3, pool: [T] * 3}, f"batch_set_v2 of kv + {pool} pages"
        )
        twin = open_hybrid(harness, config=writer.config)
        seen = twin.load({"kv": keys[:1], pool: keys[:1]})
        if seen != {"kv": writer.expect("kv", keys[:1]), pool: writer.expect(pool, keys[:1])}:
            harness.skip_unshared()
        variant = other_geometry(pool)
        reader = open_hybrid(harness, config=writer.config, replace={pool: variant})
        check_equal(reader.page_bytes(pool), writer.page_bytes(pool), "bytes per page of the other geometry")
        reader.check_pages(
            pool,
            reader.load({pool: keys})[pool],
            keys,
            [None] * 3,
            f"a deployment whose {pool} pool has another geometry (same bytes per page) reading the writer's pages",
        )
        verdict = reader.exists_v2(keys, all_pages(pool))
        check(
            verdict.restorable == [] and pool not in verdict.hits,
            f"batch_exists_v2 of a deployment whose {pool} pool has another geometry",
            "none of the writer's pages",
            verdict.describe(),
        )

    # ----------------------------------------------------------------- partial writes and faults
    def test_multi_pool_partial_write(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid(harness)
        keys = harness.keys(5)
        with failing_writes(hh, {"kv": [keys[2]], "mamba": [keys[1]], "swa": [keys[4]]}):
            written = hh.put({"kv": keys, "mamba": keys, "swa": keys})
        check_equal(
            written,
            {"kv": [T, T, F, T, T], "mamba": [T, F, T, T, T], "swa": [T, T, T, T, F]},
            "batch_set_v2 where write_pages stores all but kv/2, mamba/1, swa/4",
        )
        check_equal(hh.kv_exists(keys), [T, T, F, T, T], "exists of the KV pages after the partial write")
        sidecars = [all_pages("swa"), trailing("mamba", keys[-1:])]
        verdict = hh.exists_v2(keys, *sidecars)
        verdict_is(hh, verdict, Verdict(1, {"kv": 2, "swa": 2, "mamba": 1}, [1]), "pages kv/2, mamba/1, swa/4 missing")
        hh.check_loadable(keys, sidecars, verdict)
        got = hh.load({"kv": keys, "mamba": keys, "swa": keys})
        for pool, flags in written.items():
            hh.check_pages(pool, got[pool], keys, [0 if ok else None for ok in flags], "reading back a partial write")

    def test_multi_pool_fault_in_one_pool(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid(harness)
        keys = harness.keys(4)
        with faulting(hh, "indexer", ["write_pages"]):
            written = hh.put({"kv": keys, "indexer": keys, "mamba": keys})
        check_equal(
            written,
            {"kv": [T] * 4, "indexer": [F] * 4, "mamba": [T] * 4},
            "batch_set_v2 while write_pages faults for the indexer",
        )
        verdict_is(hh, hh.exists_v2(keys, all_pages("indexer")), Verdict(0, {"kv": 4}, []), "indexer never stored")
        check_equal(hh.put({"indexer": keys}), {"indexer": [T] * 4}, "batch_set_v2 of indexer pages")
        with faulting(hh, "indexer", ["read_pages", "pages_exist"]):
            got = hh.load({"kv": keys, "indexer": keys, "mamba": keys})
            verdict = hh.exists_v2(keys, trailing("mamba", keys[-1:]), all_pages("indexer"))
        hh.check_pages("indexer", got["indexer"], keys, [None] * 4, "indexer pages read while read_pages faults")
        hh.check_pages("kv", got["kv"], keys, 0, "KV read while the indexer faults")
        hh.check_pages("mamba", got["mamba"], keys, 0, "Mamba read while the indexer faults")
        check(
            verdict.kv_hit_pages == 0 and verdict.restorable == [] and "indexer" not in verdict.hits,
            "batch_exists_v2 gated on an indexer whose pages_exist faults",
            "no restorable prefix, no indexer verdict",
            verdict.describe(),
        )
        whole = hh.exists_v2(keys, trailing("mamba", keys[-1:]), all_pages("indexer"))
        verdict_is(hh, whole, Verdict(4, {"kv": 4, "mamba": 4, "indexer": 4}, [1, 2, 3, 4]), "after the fault")

    def test_multi_pool_server_stopped(self, harness: Harness) -> None:
        hh = self._hybrid_for_faults(harness)
        keys, fresh = harness.keys(3), harness.keys(3)
        check_equal(
            hh.put({"kv": keys, "mamba": keys}), {"kv": [T] * 3, "mamba": [T] * 3}, "batch_set_v2 of kv + mamba pages"
        )
        harness.stop_server_or_skip(hh.handle)
        written = timed("batch_set_v2", lambda: hh.put({"kv": fresh, "swa": fresh}, version=1))
        check_equal(written, {"kv": [F] * 3, "swa": [F] * 3}, "batch_set_v2 with the server stopped")
        got = timed("batch_get_v2", lambda: hh.load({"kv": keys, "mamba": keys}))
        check_equal([got["kv"], got["mamba"]], [[None] * 3] * 2, "batch_get_v2 of kv + mamba with the server stopped")
        verdict = timed("batch_exists_v2", lambda: hh.exists_v2(keys, all_pages("mamba")))
        check(
            verdict.kv_hit_pages == 0 and verdict.restorable == [],
            "batch_exists_v2 with the server stopped",
            "no hit",
            verdict.describe(),
        )
        recover(hh, keys)
        miss_or_exact(hh, "kv", fresh, [1], "a write that failed while the server was stopped")
        miss_or_exact(hh, "swa", fresh, [1], "a write that failed while the server was stopped")

    def test_multi_pool_fault_between_pools(self, harness: Harness) -> None:
        harness.require_sdk("fault injection into backend primitives")
        hh = self._hybrid_for_faults(harness)
        keys = harness.keys(4)
        errors: list[Exception] = []
        with stop_after(hh, "write_pages", "kv", errors):
            written = hh.put({"kv": keys, "mamba": keys, "swa": keys})
        if errors:
            harness.skip_no_fault_hook(errors[0])
        check_equal(
            written,
            {"kv": [T] * 4, "mamba": [F] * 4, "swa": [F] * 4},
            "batch_set_v2 with the server stopped right after its KV pages",
        )
        recover(hh, harness.keys(1))
        for pool in ("kv", "mamba", "swa"):  # a server may come back empty; what it has must be exact
            miss_or_exact(hh, pool, keys, [0], "a page of a v2 write cut short by a fault")
        hh.check_loadable(keys, [all_pages("swa")], hh.exists_v2(keys, all_pages("swa")))
        check_equal(
            hh.put({"kv": keys, "mamba": keys, "swa": keys}, version=1),
            {pool: [T] * 4 for pool in written},
            "batch_set_v2 of kv + mamba + swa pages (version 1)",
        )
        with stop_after(hh, "read_pages", "kv", errors):
            got = hh.load({"kv": keys, "mamba": keys, "swa": keys})
        hh.check_pages("kv", got["kv"], keys, 1, "KV pages read before the server stopped")
        check_equal([got["mamba"], got["swa"]], [[None] * 4] * 2, "mamba and swa pages read with the server stopped")
        recover(hh, harness.keys(1))
        check_equal(
            hh.put({"kv": keys, "swa": keys}, version=2),
            {"kv": [T] * 4, "swa": [T] * 4},
            "batch_set_v2 of kv + swa pages (version 2)",
        )
        with stop_after(hh, "pages_exist", "kv", errors):
            verdict = hh.exists_v2(keys, all_pages("swa"))
        check(
            verdict.kv_hit_pages == 0 and verdict.restorable == [] and "swa" not in verdict.hits,
            "batch_exists_v2 whose swa pages are unreachable after the KV check",
            "no restorable prefix",
            verdict.describe(),
        )
        recover(hh, harness.keys(1))

    # ----------------------------------------------------------------- bad input
    def test_multi_pool_bad_input_unknown_pool(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        keys, kept = harness.keys(2), harness.keys(2)
        stray = PoolTransfer(name="no_such_pool", host_indices=hh.indices("kv", [2, 3]), keys=list(keys))
        transfers = staged(hh, {"kv": keys, "mamba": keys})
        rejects(lambda: hh.backend.batch_set_v2([*transfers, stray]), "batch_set_v2 naming an unknown pool")
        nothing_stored(hh, keys, ["kv", "mamba"], "batch_set_v2 naming an unknown pool")
        check_equal(
            hh.put({"kv": kept, "mamba": kept}), {"kv": [T, T], "mamba": [T, T]}, "batch_set_v2 of kv + mamba pages"
        )
        fill = bytes([SENTINEL]) * hh.page_bytes("kv")
        for slot in (20, 21):
            hh.stage("kv", slot, fill)
        reads = [hh.transfer("kv", kept, [20, 21]), stray]
        rejects(lambda: hh.backend.batch_get_v2(reads), "batch_get_v2 naming an unknown pool")
        check(
            [hh.slot_bytes("kv", slot) for slot in (20, 21)] == [fill, fill],
            "KV host slots 20, 21 after a rejected batch_get_v2 naming an unknown pool",
            "untouched (the sentinel)",
            "written before the call was rejected",
        )
        query = [PoolTransfer(name="no_such_pool", keys=list(kept), hit_policy=PoolHitPolicy.ALL_PAGES)]
        rejects(lambda: hh.backend.batch_exists_v2(list(kept), query), "batch_exists_v2 naming an unknown pool")

    @pytest.mark.parametrize("bad", ["first", "second"])
    def test_multi_pool_bad_input_length_mismatch(self, harness: Harness, bad: str) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        keys = harness.keys(3)
        transfers = staged(hh, {"kv": keys, "mamba": keys})
        index = 0 if bad == "first" else 1
        pool = transfers[index].name
        short = PoolTransfer(name=pool, host_indices=hh.indices(pool, [0, 1]), keys=list(keys))  # a page short
        broken = list(transfers)
        broken[index] = short
        rejects(lambda: hh.backend.batch_set_v2(broken), f"batch_set_v2 with {pool}'s host_indices a page short")
        nothing_stored(hh, keys, ["kv", "mamba"], f"batch_set_v2 with a bad {bad} transfer")
        check_equal(
            hh.put({"kv": keys, "mamba": keys}), {"kv": [T] * 3, "mamba": [T] * 3}, "batch_set_v2 of kv + mamba pages"
        )
        fills = {name: bytes([SENTINEL]) * hh.page_bytes(name) for name in ("kv", "mamba")}
        for name, fill in fills.items():
            for slot in (20, 21, 22):
                hh.stage(name, slot, fill)
        reads = [hh.transfer("kv", keys, [20, 21, 22]), hh.transfer("mamba", keys, [20, 21, 22])]
        reads[index] = PoolTransfer(name=pool, host_indices=hh.indices(pool, [20, 21, 22, 23]), keys=list(keys))
        rejects(lambda: hh.backend.batch_get_v2(reads), f"batch_get_v2 with {pool}'s host_indices a page long")
        for name, fill in fills.items():
            check(
                all(hh.slot_bytes(name, slot) == fill for slot in (20, 21, 22)),
                f"{name} host slots 20-22 after a rejected batch_get_v2",
                "untouched (the sentinel)",
                "written",
            )

    def test_multi_pool_bad_input_before_pools_registered(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness, finish=False)
        keys = harness.keys(2)
        transfers = staged(hh, {"kv": keys, "mamba": keys})
        rejects(lambda: hh.backend.batch_set_v2(transfers), "batch_set_v2 before on_host_pools_registered()")
        before = {name: [hh.slot_bytes(name, slot) for slot in (0, 1)] for name in ("kv", "mamba")}
        rejects(lambda: hh.backend.batch_get_v2(transfers), "batch_get_v2 before on_host_pools_registered()")
        check(
            {name: [hh.slot_bytes(name, slot) for slot in (0, 1)] for name in before} == before,
            "host slots 0, 1 after a rejected batch_get_v2",
            "untouched",
            "written",
        )
        rejects(
            lambda: hh.backend.batch_exists_v2(list(keys), [all_pages("mamba").transfer()]),
            "batch_exists_v2 before on_host_pools_registered()",
        )
        hh.backend.on_host_pools_registered()
        nothing_stored(hh, keys, ["kv", "mamba"], "v2 calls rejected before on_host_pools_registered()")
        check_equal(
            hh.put({"kv": keys, "mamba": keys}), {"kv": [T, T], "mamba": [T, T]}, "batch_set_v2 of kv + mamba pages"
        )

    def test_multi_pool_bad_input_pool_registered_twice(self, harness: Harness) -> None:
        harness.require_sdk("request validation")
        hh = self._hybrid(harness)
        backend = hh.backend
        rejects(
            lambda: backend.register_mem_host_pool_v2(other_geometry("mamba"), "mamba"),
            "registering 'mamba' again with another geometry",
            ConfigError,
        )
        rejects(
            lambda: backend.register_mem_host_pool_v2(hh.pools["indexer"], "swa"),
            "registering 'swa' again with the indexer's geometry",
            ConfigError,
        )
        backend.register_mem_host_pool_v2(hh.pools["mamba"], "mamba")  # the same pool again: no-op
        keys = harness.keys(2)
        check_equal(
            hh.put({"mamba": keys, "swa": keys}), {"mamba": [T, T], "swa": [T, T]}, "batch_set_v2 of mamba + swa pages"
        )
        got = hh.load({"mamba": keys, "swa": keys})
        hh.check_pages("mamba", got["mamba"], keys, 0, "mamba pages after a rejected registration")
        hh.check_pages("swa", got["swa"], keys, 0, "swa pages after a rejected registration")
