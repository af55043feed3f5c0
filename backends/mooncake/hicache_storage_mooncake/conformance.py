"""Test-only hooks of the mooncake backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``mooncake``: the
stored objects through :class:`~hicache_storage_mooncake.raw_store.MooncakeRawStore` (the
backend's own client, byte-level calls). There is no fault hook: an outage of a Mooncake Store is
its master going away, which only whoever runs the master can bring about (the backend's own
tests kill and restart their test master).
"""

from __future__ import annotations

from .backend import MooncakeBackend
from .raw_store import MooncakeRawStore

__all__ = ["MooncakeHooks"]


class MooncakeHooks:
    """The side channel of :class:`MooncakeBackend`."""

    def raw_store(self, backend: MooncakeBackend) -> MooncakeRawStore:
        return MooncakeRawStore(backend)
