"""``batch_exists_v2``'s fold: from per-page presence to restorable prefixes (no I/O here).

The rules, each matching SGLang 0.5.23's file backend (written out in ``docs/contract.md``):

- The KV hit is the leading run of present KV pages (all pages when the anchor pool holds no KV
  bytes). Every prefix length ``1..kv_pages`` starts out restorable.
- Pools are folded in request order; once no prefix is left, later pools get no verdict.
- ``ALL_PAGES``: the pool's boundary is its first missing page below ``kv_pages``; prefixes up to
  the boundary stay restorable.
- ``TRAILING_PAGES`` with window ``w = max(1, len(transfer.keys))``: prefix ``p`` stays
  restorable when pages ``[max(0, p - w), p)`` are all present; the boundary is the largest such
  ``p``. Holes are possible (5 restorable while 4 is not).
- ``BLOCK_GROUPS``: the pool's own keys in groups of ``group_pages``; its verdict is
  ``block_pages`` per leading complete group (capped at ``kv_pages``); it never removes prefixes.
- A pool is named in ``extra_pool_hit_pages`` only with a non-zero boundary; the answer's
  ``kv_hit_pages`` is the largest prefix still restorable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .names import PoolHitPolicy, PoolName, PoolTransferResult

__all__ = ["PoolPresence", "fold_pool_hits", "leading_run"]


@dataclass(frozen=True)
class PoolPresence:
    """One sidecar pool's presence flags for the fold.

    ``present``: for ``ALL_PAGES``/``TRAILING_PAGES`` one flag per KV page (at least the first
    ``kv_pages``); for ``BLOCK_GROUPS`` one flag per key of the pool's transfer.
    """

    name: Any
    policy: PoolHitPolicy
    present: Sequence[bool]
    window: int = 1
    block_pages: int = 0
    group_pages: int = 0


def leading_run(flags: Sequence[bool]) -> int:
    """Number of leading ``True`` flags."""
    for index, flag in enumerate(flags):
        if not flag:
            return index
    return len(flags)


def _trailing(present: Sequence[bool], kv_pages: int, window: int) -> set[int]:
    """Prefix lengths whose window of ``window`` pages is fully present (one pass)."""
    restorable: set[int] = set()
    missing_before = -1  # index of the last missing page seen so far
    for end in range(1, kv_pages + 1):
        if not present[end - 1]:
            missing_before = end - 1
        start = end - window
        if missing_before < (start if start > 0 else 0):
            restorable.add(end)
    return restorable


def _block_groups(presence: PoolPresence, kv_pages: int) -> int:
    groups = 0
    flags = presence.present
    size = presence.group_pages
    while (groups + 1) * size <= len(flags) and all(flags[groups * size : (groups + 1) * size]):
        groups += 1
    return min(kv_pages, groups * presence.block_pages)


def fold_pool_hits(kv_pages: int, pools: Sequence[PoolPresence], kv_name: Any = PoolName.KV) -> PoolTransferResult:
    """The :class:`PoolTransferResult` for a KV hit of ``kv_pages`` and the pools' presence flags."""
    hits: dict[Any, int] = {kv_name: kv_pages} if kv_pages else {}
    restorable = list(range(1, kv_pages + 1))
    for pool in pools:
        if not restorable:
            break
        if pool.policy is PoolHitPolicy.BLOCK_GROUPS:
            covered = _block_groups(pool, kv_pages)
            if covered:
                hits[pool.name] = covered
            continue
        if pool.policy is PoolHitPolicy.ALL_PAGES:
            boundary = leading_run(pool.present[:kv_pages])
            allowed: set[int] | range = range(1, boundary + 1)
        else:
            allowed = _trailing(pool.present, kv_pages, max(1, pool.window))
            boundary = max(allowed, default=0)
        if boundary:
            hits[pool.name] = boundary
        restorable = [length for length in restorable if length in allowed]
    return PoolTransferResult(restorable[-1] if restorable else 0, hits, restorable)
