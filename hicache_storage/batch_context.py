"""What one primitive call is about: :class:`BatchContext`, handed to every backend primitive.

One backend instance serves several pools (KV plus sidecars such as Mamba state or SWA window
KV), and their pages differ in size: a primitive must take the page size and the key space from
its context, never from the instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .keys import KeySpace

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
    """

    pool: str
    keyspace: KeySpace
    prefix_keys: tuple[str, ...] = ()
    extra_info: Mapping[str, Any] | None = None

    @property
    def page_bytes(self) -> int:
        """Bytes of every page in this call."""
        return self.keyspace.page_bytes

    def parent_storage_key(self) -> str | None:
        """Storage key of the page just before the call's first key, when the caller named it."""
        if not self.prefix_keys:
            return None
        return self.keyspace.storage_key(self.prefix_keys[-1])
