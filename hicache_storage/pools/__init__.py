"""Host pools and multi-pool (v2) requests: names and types, pool facts, registration, planning, hit folds.

- :mod:`.names`: ``PoolName``, ``PoolHitPolicy``, ``PoolTransfer``, ``PoolTransferResult`` (SGLang's shapes);
- :mod:`.host`: the :class:`HostPool` protocol and the :class:`PoolFacts` read from a pool once;
- :mod:`.context`: the :class:`BatchContext` every primitive call receives;
- :mod:`.registry`: the pools one storage instance serves; :mod:`.buffers`: their pages as segment lists;
- :mod:`.plan`: a v2 call's transfers validated into per-pool steps; :mod:`.hits`: ``batch_exists_v2``'s fold;
- :mod:`.state_pool`: a host pool of fixed-size state slots (Mamba/GDN).
"""

from __future__ import annotations

from .context import KV_POOL, BatchContext
from .host import HostPool, PoolFacts, pool_facts
from .names import PoolHitPolicy, PoolName, PoolTransfer, PoolTransferResult, count_pool_hits, pool_name_str
from .state_pool import HostStatePool

__all__ = [
    "KV_POOL",
    "BatchContext",
    "HostPool",
    "HostStatePool",
    "PoolFacts",
    "PoolHitPolicy",
    "PoolName",
    "PoolTransfer",
    "PoolTransferResult",
    "count_pool_hits",
    "pool_facts",
    "pool_name_str",
]
