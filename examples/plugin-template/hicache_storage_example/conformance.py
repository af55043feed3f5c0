"""Test-only hooks of the backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_hooks`` under the backend's
name, so ``hicache-storage conformance example`` finds them. The suite calls each hook with the
backend instance under test:

- ``raw_store(backend)``: the stored records by storage key, as a mutable mapping (the suite
  truncates, corrupts and removes records through it, and checks they read as misses);
- ``stop_server(backend)`` / ``start_server(backend)``: make the store itself fail, then work
  again (the suite checks every batch call answers misses / ``False`` meanwhile, never raises).

A backend over a real service implements the same methods with its own client: a raw ``GET`` /
``SET`` / ``DEL`` for the records, stopping and starting a test server for the outage.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

from .backend import ExampleBackend


class _Unreachable(MutableMapping[str, bytes]):
    """A store that refuses every call, as a server that went away would."""

    def __init__(self, inner: MutableMapping[str, bytes]) -> None:
        self.inner = inner

    def _refuse(self) -> ConnectionError:
        return ConnectionError("store unreachable (stopped by the conformance suite)")

    def __getitem__(self, key: str) -> bytes:
        raise self._refuse()

    def __setitem__(self, key: str, value: bytes) -> None:
        raise self._refuse()

    def __delitem__(self, key: str) -> None:
        raise self._refuse()

    def __iter__(self) -> Iterator[str]:
        raise self._refuse()

    def __len__(self) -> int:
        raise self._refuse()

    def __contains__(self, key: object) -> bool:
        raise self._refuse()


class ExampleHooks:
    """The hooks for ``ExampleBackend`` (any class with these method names works; no base class needed)."""

    def raw_store(self, backend: ExampleBackend) -> MutableMapping[str, bytes]:
        return backend.records

    def stop_server(self, backend: ExampleBackend) -> None:
        if not isinstance(backend.records, _Unreachable):
            backend.records = _Unreachable(backend.records)

    def start_server(self, backend: ExampleBackend) -> None:
        if isinstance(backend.records, _Unreachable):
            backend.records = backend.records.inner
