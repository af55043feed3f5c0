"""Whether a registered pool's pages split into head shards, and the key space its shards live in.

Splitting is on for a pool of :data:`~hicache_storage.pools.shards.SHARDED_POOLS` when
``tp_lcm_size`` is set and ``head_shards`` is not turned off, the model is not rank-replicated
(MLA) and the pool's global KV head count ``H`` divides by ``tp_lcm_size``. Replicated heads
(``tp_size > kv_heads``) and a head count that does not divide turn it off for that deployment
with one warning; its keys then stay rank-local.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from ..host_pool import LAYOUTS, parse_dtype
from ..keys import KeySpace
from ..settings import StorageSettings
from .host import PoolFacts
from .shards import SHARDED_POOLS, HeadShards

__all__ = ["SHARD_LAYOUT", "plan_head_shards", "shard_space", "sharded_keyspace"]

logger = logging.getLogger(__name__)

#: The layout a head-sharded key space names: shard bytes do not depend on the host layout.
SHARD_LAYOUT = "head_shards"


def _geometry_int(facts: PoolFacts, name: str) -> int | None:
    value = dict(facts.geometry).get(name)
    return int(value) if value is not None and value.isdigit() else None


def plan_head_shards(
    name: str, config: Any, settings: StorageSettings, facts: PoolFacts, off: set[str] | None = None
) -> HeadShards | None:
    """This rank's :class:`HeadShards` for pool ``name``, or ``None`` when its pages stay whole.

    ``off``: the pools of this deployment whose sharing is already off; a warning is logged only for
    the first (one per deployment), and ``name`` joins them when it is off too.
    """
    warned = off if off is not None else set()
    lcm = settings.tp_lcm_size
    if lcm is None or not settings.head_shards or name not in SHARDED_POOLS:
        return None
    if config.is_mla_model or facts.is_mla or facts.holds_no_bytes:
        return None  # rank-replicated KV: no rank in its keys, nothing to split
    tp_size, tp_rank = int(config.tp_size), int(config.tp_rank)
    heads, head_dim, layers = (_geometry_int(facts, item) for item in ("head_num", "head_dim", "layer_num"))
    if heads is None or head_dim is None or layers is None or facts.layout not in LAYOUTS:
        return _off(
            name, f"the host pool (layout {facts.layout!r}) does not say its head_num, head_dim and layer_num", warned
        )
    total = settings.kv_heads if settings.kv_heads is not None else heads * tp_size
    if tp_size > total or heads * tp_size != total:
        return _off(name, f"KV heads are replicated across ranks (kv_heads={total}, tp_size={tp_size})", warned)
    if total % lcm:
        return _off(name, f"the model's {total} KV heads do not divide by tp_lcm_size={lcm}", warned)
    split = lcm // tp_size
    row = head_dim * parse_dtype(facts.dtype).itemsize
    return HeadShards(lcm, tp_rank * split, split, heads, row, layers, facts.page_size, facts.layout)


def sharded_keyspace(space: KeySpace, shards: HeadShards, tp_size: int) -> KeySpace:
    """The key space of ``space``'s shards: global head geometry instead of tp rank and size."""
    return replace(
        space,
        layout=SHARD_LAYOUT,
        page_bytes=shards.shard_bytes,
        tp_rank=0,
        tp_size=1,
        tp_sharded=False,
        shards=shards.lcm,
        geometry=(
            ("kv_heads", str(shards.heads * tp_size)),
            ("head_bytes", str(shards.row_bytes)),
            ("layer_num", str(shards.layers)),
        ),
    )


def shard_space(
    name: str, config: Any, settings: StorageSettings, facts: PoolFacts, space: KeySpace, *, off: set[str] | None = None
) -> tuple[KeySpace, HeadShards | None]:
    """Pool ``name``'s key space and head shards: ``(space, None)`` when its pages stay whole (``off``: as for
    :func:`plan_head_shards`)."""
    shards = plan_head_shards(name, config, settings, facts, off)
    return (space, None) if shards is None else (sharded_keyspace(space, shards, int(config.tp_size)), shards)


def _off(name: str, why: str, warned: set[str]) -> HeadShards | None:
    """Note that pool ``name`` keeps whole, rank-local pages (warning, with why, for the first such pool); ``None``."""
    if not warned:
        logger.warning("pool %r: head shards off for this deployment, keys stay rank-local: %s", name, why)
    warned.add(name)
    return None
