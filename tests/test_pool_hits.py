"""The v2 fold against a literal reading of its rules, on generated presence patterns."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hicache_storage.pools import PoolHitPolicy, PoolName
from hicache_storage.pools.hits import PoolPresence, fold_pool_hits, leading_run


def literal(kv_pages: int, pools: list[PoolPresence]) -> tuple[int, dict[object, int], list[int]]:
    """The rules as written in the contract, one prefix length at a time."""
    hits: dict[object, int] = {PoolName.KV: kv_pages} if kv_pages else {}
    restorable = list(range(1, kv_pages + 1))
    for pool in pools:
        if not restorable:
            break
        if pool.policy is PoolHitPolicy.BLOCK_GROUPS:
            groups = 0
            while (groups + 1) * pool.group_pages <= len(pool.present) and all(
                pool.present[groups * pool.group_pages : (groups + 1) * pool.group_pages]
            ):
                groups += 1
            if min(kv_pages, groups * pool.block_pages):
                hits[pool.name] = min(kv_pages, groups * pool.block_pages)
            continue
        if pool.policy is PoolHitPolicy.ALL_PAGES:
            allowed = {p for p in range(1, kv_pages + 1) if all(pool.present[:p])}
        else:
            allowed = {p for p in range(1, kv_pages + 1) if all(pool.present[max(0, p - pool.window) : p])}
        if allowed:
            hits[pool.name] = max(allowed)
        restorable = [p for p in restorable if p in allowed]
    return (restorable[-1] if restorable else 0), hits, restorable


presence = st.integers(min_value=0, max_value=12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(
            st.tuples(
                st.sampled_from(list(PoolHitPolicy)),
                st.lists(st.booleans(), min_size=n, max_size=n + 4),
                st.integers(min_value=1, max_value=4),
                st.integers(min_value=1, max_value=3),
            ),
            max_size=3,
        ),
    )
)


@given(presence)
def test_fold_matches_the_written_rules(case: tuple[int, list[tuple[PoolHitPolicy, list[bool], int, int]]]) -> None:
    kv_pages, raw = case
    pools = [
        PoolPresence(f"p{i}", policy, flags, window=w, block_pages=w, group_pages=g)
        for i, (policy, flags, w, g) in enumerate(raw)
    ]
    result = fold_pool_hits(kv_pages, pools)
    assert (result.kv_hit_pages, result.extra_pool_hit_pages, result.restorable_prefix_pages) == literal(
        kv_pages, pools
    )


def test_leading_run() -> None:
    assert leading_run([]) == 0
    assert leading_run([True, True, False, True]) == 2
    assert leading_run([True] * 3) == 3
