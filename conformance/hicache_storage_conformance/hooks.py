"""``ConformanceHooks``: a backend's test-only hooks, kept out of the backend class.

A production backend carries no methods that exist only for its tests. The suite needs two kinds
of hooks to check some promises:

- a **side channel** to the stored pages, behind the backend's back (integrity: truncate, corrupt,
  remove a page): ``raw_store(backend)`` returning a mutable mapping storage key → stored bytes,
  or ``read_stored`` / ``write_stored`` / ``delete_stored``;
- a **fault hook** that makes the real store fail and recover (the server goes away and comes
  back): ``stop_server(backend)`` / ``start_server(backend)``.

``backend`` is the author's :class:`~hicache_storage.plugin.Backend` instance
(``storage.backend``). Write the hooks in a class beside the backend (any class with some of these
method names; subclassing :class:`ConformanceHooks` is optional) and register it in the entry-point
group ``hicache_storage.conformance_hooks`` under the backend's entry-point name: that is how the
suite finds them. A backend given by class or ``module:Class`` names its hooks explicitly
(``hooks = ...`` on the test class, ``--hooks module:Name`` on the command line).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from importlib import metadata
from typing import Any

from hicache_storage import BackendLoadError
from hicache_storage.testing import import_object
from hicache_storage.testing.hooks import SideChannelUnavailable

__all__ = ["HOOKS_GROUP", "ConformanceHooks", "SideChannelUnavailable", "as_hooks", "find_hooks"]

#: Entry-point group of conformance hooks (name = the backend's entry-point name).
HOOKS_GROUP = "hicache_storage.conformance_hooks"

_HOOKS = ("raw_store", "read_stored", "write_stored", "delete_stored", "stop_server", "start_server")


class ConformanceHooks:
    """Test-only hooks for one backend (every method receives the backend instance under test).

    Defaults: the stored-bytes hooks go through :meth:`raw_store`; a hook that is not provided
    raises :class:`SideChannelUnavailable`, and the tests needing it skip (kind ``hook``, a failure
    under the strict profile). ``storage_key`` is the key the backend stores a page under
    (``storage.keyspace.storage_key(bare)``; the bare key for an SGLang-surface class).
    """

    # ---------------------------------------------------------------- side channel
    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        """The stored records by storage key, as a mutable mapping (reads, writes and deletes go to the store)."""
        raise SideChannelUnavailable(
            f"no side channel to {type(backend).__name__}'s stored pages: its hooks implement neither "
            "raw_store(backend) nor read_stored/write_stored/delete_stored"
        )

    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        """The stored bytes of ``storage_key`` (``None`` when nothing is stored)."""
        value = self.raw_store(backend).get(storage_key)
        return None if value is None else bytes(value)

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        """Replace the stored bytes of ``storage_key``."""
        self.raw_store(backend)[storage_key] = bytes(data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        """Remove the stored page of ``storage_key`` (no error when absent)."""
        self.raw_store(backend).pop(storage_key, None)

    # ---------------------------------------------------------------- fault hook
    def stop_server(self, backend: Any) -> None:
        """Make the real store fail (every call of the backend to it errors or times out)."""
        raise SideChannelUnavailable(f"no fault hook: the hooks of {type(backend).__name__} lack stop_server")

    def start_server(self, backend: Any) -> None:
        """Bring the store back (the backend must work again within 10 s)."""
        raise SideChannelUnavailable(f"no fault hook: the hooks of {type(backend).__name__} lack start_server")

    # ---------------------------------------------------------------- description
    def describe(self) -> str:
        """Which hooks this object provides."""
        own = [name for name in _HOOKS if _provides(self, name)]
        if type(self) is ConformanceHooks:
            return "no conformance hooks"
        return f"{_name(self)} ({', '.join(own) or 'no hook of its own'})"


def _name(hooks: ConformanceHooks) -> str:
    return type(hooks.inner if isinstance(hooks, _Adapter) else hooks).__qualname__


def _provides(hooks: ConformanceHooks, name: str) -> bool:
    if isinstance(hooks, _Adapter):
        return callable(getattr(hooks.inner, name, None))
    return getattr(type(hooks), name) is not getattr(ConformanceHooks, name)


class _Adapter(ConformanceHooks):
    """A plain object with some of the hook methods, completed with the defaults."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _call(self, name: str, *args: Any) -> Any:
        """The inner object's own ``name`` if it has one, else the default hook."""
        own = getattr(self.inner, name, None)
        return own(*args) if callable(own) else getattr(super(), name)(*args)

    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        store: MutableMapping[str, bytes] = self._call("raw_store", backend)
        return store

    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        data: bytes | None = self._call("read_stored", backend, storage_key)
        return data

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        self._call("write_stored", backend, storage_key, data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        self._call("delete_stored", backend, storage_key)

    def stop_server(self, backend: Any) -> None:
        self._call("stop_server", backend)

    def start_server(self, backend: Any) -> None:
        self._call("start_server", backend)


def as_hooks(value: Any) -> ConformanceHooks:
    """:class:`ConformanceHooks` from a hooks instance or class, a plain hook object or class, or a
    ``"module:Name"`` path; raises :class:`BackendLoadError` when a path cannot be imported."""
    if isinstance(value, str):
        value = import_object(value, "conformance hooks")
    if isinstance(value, type):
        value = value()
    return value if isinstance(value, ConformanceHooks) else _Adapter(value)


def find_hooks(backend: str | type | None, explicit: Any = None) -> tuple[ConformanceHooks, str]:
    """The hooks for ``backend`` and where they came from: ``explicit`` (hooks, a class or ``module:Name``)
    when given, else the :data:`HOOKS_GROUP` entry point named like the backend, else none."""
    if explicit is not None:
        return as_hooks(explicit), "given explicitly"
    if isinstance(backend, str):
        for entry in metadata.entry_points(group=HOOKS_GROUP):
            if entry.name != backend:
                continue
            try:
                return as_hooks(entry.load()), f"entry point {HOOKS_GROUP}:{entry.name}"
            except Exception as exc:
                raise BackendLoadError(
                    f"conformance hooks entry point {entry.name!r} ({entry.value}) cannot be loaded: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
    return ConformanceHooks(), "none"
