"""Test-only hooks of the sim backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` as ``sim``: the stored
records through :class:`~hicache_storage_sim.store.RawStore`, and an outage of the whole store
(every instance sharing a named store sees it).
"""

from __future__ import annotations

from .backend import SimBackend
from .store import RawStore

__all__ = ["SimHooks"]


class SimHooks:
    """The side channel and the outage switch of :class:`SimBackend`."""

    def raw_store(self, backend: SimBackend) -> RawStore:
        return RawStore(backend.store)

    def stop_server(self, backend: SimBackend) -> None:
        backend.store.available = False

    def start_server(self, backend: SimBackend) -> None:
        backend.store.available = True
