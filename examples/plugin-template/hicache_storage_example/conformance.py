"""Test-only hooks of the backend for the conformance suite, kept out of the backend class.

Registered in the entry-point group ``hicache_storage.conformance_targets`` under the backend's
name, so ``hicache-storage conformance example`` finds them; the test class names them too. The
suite calls each hook with the backend instance under test:

- ``raw_store(backend)``: the stored records by storage key, as a mutable mapping (the suite
  truncates, corrupts and removes records through it, and checks they read as misses);
- ``stop_server(backend)`` / ``start_server(backend)``: make the store itself fail, then work
  again (the suite checks every batch call answers misses / ``False`` meanwhile, never raises).

A backend over a real service implements the same methods with its own client: a raw ``GET`` /
``SET`` / ``DEL`` for the records, stopping and starting a test server for the outage.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any


class _Unreachable(MutableMapping[str, bytes]):
    """A store that refuses every call, as a server that went away would."""

    def __init__(self, inner: dict[str, bytes]) -> None:
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


class ExampleTarget:
    """The hooks for ``ExampleBackend`` (any class with these method names works; no base class needed)."""

    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        records: MutableMapping[str, bytes] = backend._records
        return records

    def stop_server(self, backend: Any) -> None:
        if not isinstance(backend._records, _Unreachable):
            backend._records = _Unreachable(backend._records)

    def start_server(self, backend: Any) -> None:
        if isinstance(backend._records, _Unreachable):
            backend._records = backend._records.inner
