"""What one primitive call is about: :class:`BatchContext`, handed to every backend primitive.

One backend instance serves several pools (KV plus sidecars such as Mamba state or SWA window
KV), and their pages differ in size: a primitive must take the page size and the key space from
its context, never from the instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..keys import KeySpace

__all__ = ["KV_POOL", "BatchContext"]

#: Name of the main KV pool (the one ``register_mem_pool_host`` attaches).
KV_POOL = "kv"


@dataclass(frozen=True)
class BatchContext:
    """The pool, key space and caller hints of one primitive call.

    - ``pool``: the pool's name (``"kv"`` for the main KV pool).
    - ``keyspace``: that pool's :class:`KeySpace`; ``keyspace.page_bytes`` is the size of every
      page in the call and ``keyspace.prefix`` starts every storage key of the call.
    - ``prefix_keys``: bare page hashes that precede the call's keys in their chain (empty when
      the caller gave none); ``prefix_keys + keys`` is one chain.
    - ``extra_info``: the caller's free-form ``extra_info.extra_info`` dict, if any.
    - ``record_bytes``: set when the call moves records of another size than the key space's
      pages (a key space's manifest); :attr:`page_bytes` then returns it.

    A backend that files records by key space should take the key space from each storage key's
    own prefix (:func:`hicache_storage.listing.keyspace_prefix_of`) together with
    :attr:`page_bytes`: operator calls (listing, manifests, purges) pass storage keys of several key
    spaces with a placeholder ``keyspace``.
    """

    pool: str
    keyspace: KeySpace
    prefix_keys: tuple[str, ...] = ()
    extra_info: Mapping[str, Any] | None = None
    record_bytes: int | None = None

    @property
    def page_bytes(self) -> int:
        """Bytes of every page (record payload) in this call."""
        return self.keyspace.page_bytes if self.record_bytes is None else self.record_bytes

    def parent_storage_key(self) -> str | None:
        """Storage key of the page just before the call's first key, when the caller named it."""
        if not self.prefix_keys:
            return None
        return self.keyspace.storage_key(self.prefix_keys[-1])
