"""Multi-pool (v2) request and result types, named and shaped as in SGLang 0.5.23.

Hybrid models keep sidecar pools beside the KV pool (Mamba/GDN state, SWA window KV, DSA
indexer, DeepSeek-V4 compressed pools, draft pools). A :class:`PoolTransfer` names one pool and
the pages of it to move; :class:`PoolTransferResult` is what ``batch_exists_v2`` answers.
Inside SGLang the adapter receives SGLang's own objects of these names; any object with the same
fields is accepted by :class:`~hicache_storage.HiCacheStorage`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "PoolHitPolicy",
    "PoolName",
    "PoolTransfer",
    "PoolTransferResult",
    "count_pool_hits",
    "pool_name_str",
]


class PoolName(str, Enum):
    """Well-known pool names (SGLang's values); any safe string names a pool too."""

    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    AUXILIARY_SWA = "auxiliary_swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C1 = "deepseek_v4_c1"
    DEEPSEEK_V4_C1_INDEXER = "deepseek_v4_c1_indexer"
    DEEPSEEK_V4_C1_INDEXER_SCALE = "deepseek_v4_c1_indexer_scale"
    DEEPSEEK_V4_C2 = "deepseek_v4_c2"
    DEEPSEEK_V4_C2_INDEXER = "deepseek_v4_c2_indexer"
    DEEPSEEK_V4_C2_INDEXER_SCALE = "deepseek_v4_c2_indexer_scale"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C4_INDEXER_SCALE = "deepseek_v4_c4_indexer_scale"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_ROPE = "deepseek_v4_c4_rope"
    DEEPSEEK_V4_C128_ROPE = "deepseek_v4_c128_rope"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return str(self.value)


class PoolHitPolicy(str, Enum):
    """How a sidecar pool's pages decide which KV prefixes are restorable (see ``docs/contract.md``).

    - ``ALL_PAGES``: every page of the prefix must exist in the pool (e.g. a DSA indexer).
    - ``TRAILING_PAGES``: only the window of the last ``len(transfer.keys)`` pages before the
      prefix end must exist (Mamba state, SWA window KV).
    - ``BLOCK_GROUPS``: the pool's own keys form groups of ``group_pages`` keys, one group per
      block of ``block_pages`` KV pages from the span start; the pool reports how many KV pages
      its leading complete groups cover and never gates the KV hit.
    """

    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"
    BLOCK_GROUPS = "block_groups"


def pool_name_str(name: object) -> str:
    """The plain string of a pool name (an enum member's value, else ``str(name)``)."""
    value = getattr(name, "value", name)
    return value if isinstance(value, str) else str(value)


@dataclass
class PoolTransfer:
    """One pool's part of a v2 call.

    Storage calls use ``keys`` (one per page of this pool) and ``host_indices`` (``len(keys) *
    page_size`` slots of this pool's host pool, or of ``indices_from_pool``'s when the pool reuses
    another pool's indices). ``hit_policy``, ``block_pages`` and ``group_pages`` steer
    ``batch_exists_v2``.
    """

    name: Any
    host_indices: Any = None
    device_indices: Any = None
    keys: list[str] | None = None
    hit_policy: Any = PoolHitPolicy.ALL_PAGES
    nodes_to_load: list[Any] | None = None
    indices_from_pool: Any = None
    block_pages: int = 0
    group_pages: int = 0


@dataclass
class PoolTransferResult:
    """What ``batch_exists_v2`` found.

    ``kv_hit_pages``: the longest restorable prefix (pages). ``extra_pool_hit_pages``: each pool's
    own boundary, present only when non-zero (``"kv"`` for the KV pool). ``restorable_prefix_pages``:
    every prefix length (1-based, ascending) at which KV and every gating pool can be restored;
    trailing windows leave holes, and ranks intersect these sets.
    """

    kv_hit_pages: int
    extra_pool_hit_pages: dict[Any, int] = field(default_factory=dict)
    restorable_prefix_pages: list[int] | None = None

    @classmethod
    def empty(cls) -> PoolTransferResult:
        """No hit at all."""
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        """Keep the largest KV hit seen across batches."""
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: dict[Any, int]) -> None:
        """Record per-pool counts (later values replace earlier ones)."""
        self.extra_pool_hit_pages.update(results)


def count_pool_hits(results: dict[Any, list[bool]]) -> dict[Any, int]:
    """Leading run of successes per pool of a ``batch_get_v2``/``batch_set_v2`` result."""
    return {name: (flags.index(False) if False in flags else len(flags)) for name, flags in results.items()}
