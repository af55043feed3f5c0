"""``ConformanceTarget``: a backend's test-only hooks, kept out of the backend class.

A production backend should not carry methods that exist only for its tests. The suite needs two
kinds of hooks to check some promises:

- a **side channel** to the stored pages, behind the backend's back (integrity: truncate, corrupt,
  remove a page): ``raw_store(backend)`` returning a mutable mapping storage key → stored bytes,
  or ``read_stored`` / ``write_stored`` / ``delete_stored``;
- a **fault hook** that makes the real store fail and recover (faults: the server goes away and
  comes back): ``stop_server(backend)`` / ``start_server(backend)``.

Write them in a class beside the backend (any class with these method names; subclassing
:class:`ConformanceTarget` is optional) and register it in the entry-point group
``hicache_storage.conformance_targets`` under the backend's entry-point name, or pass it with
``--target module:Class`` (CLI) / ``conformance_target = ...`` (test class). Without one, the suite
looks for ``raw_store()``, ``path_for(storage_key)`` and ``set_available(flag)`` on the instance.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import MutableMapping
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from hicache_storage import BackendLoadError

__all__ = ["TARGET_GROUP", "ConformanceTarget", "SideChannelUnavailable", "as_target", "find_target"]

#: Entry-point group of conformance targets (name = the backend's entry-point name).
TARGET_GROUP = "hicache_storage.conformance_targets"

_HOOKS = ("raw_store", "read_stored", "write_stored", "delete_stored", "stop_server", "start_server")


class SideChannelUnavailable(Exception):
    """The backend offers no way to reach its stored pages (or server) behind its back."""


class ConformanceTarget:
    """Test-only hooks for one backend (every method receives the backend instance under test).

    Defaults: ``raw_store`` calls ``backend.raw_store()`` when the instance has one; the stored-bytes
    hooks go through :meth:`raw_store`, else ``backend.path_for(storage_key)`` (a file per page);
    ``stop_server`` / ``start_server`` call ``backend.set_available(False / True)``. A hook that
    cannot work raises :class:`SideChannelUnavailable`, and the tests needing it skip (kind ``hook``,
    a failure under the strict profile).

    ``storage_key`` is the key the backend stores a page under (``backend.keyspace.storage_key(bare)``,
    the bare key for an SGLang-surface class).
    """

    #: The backend these hooks serve (entry-point name, ``module:Class`` or the class); informative.
    backend: ClassVar[str | type | None] = None

    # ---------------------------------------------------------------- side channel
    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        """The stored records by storage key, as a mutable mapping (reads, writes and deletes go to the store)."""
        raw = getattr(backend, "raw_store", None)
        if callable(raw):
            return raw()  # type: ignore[no-any-return]
        raise SideChannelUnavailable(
            f"{type(backend).__name__} exposes no side channel: no ConformanceTarget implements raw_store(backend) "
            "or read_stored/write_stored/delete_stored, and the instance has no raw_store() or path_for()"
        )

    def _path(self, backend: Any, storage_key: str) -> Path | None:
        path_for = getattr(backend, "path_for", None)
        return Path(path_for(storage_key)) if callable(path_for) else None

    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        """The stored bytes of ``storage_key`` (``None`` when nothing is stored)."""
        try:
            value = self.raw_store(backend).get(storage_key)
        except SideChannelUnavailable:
            path = self._path(backend, storage_key)
            if path is None:
                raise
            try:
                return path.read_bytes()
            except FileNotFoundError:
                return None
        return None if value is None else bytes(value)

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        """Replace the stored bytes of ``storage_key``."""
        try:
            store = self.raw_store(backend)
        except SideChannelUnavailable:
            path = self._path(backend, storage_key)
            if path is None:
                raise
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            return
        store[storage_key] = bytes(data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        """Remove the stored page of ``storage_key`` (no error when absent)."""
        try:
            store = self.raw_store(backend)
        except SideChannelUnavailable:
            path = self._path(backend, storage_key)
            if path is None:
                raise
            if path.exists():
                os.remove(path)
            return
        store.pop(storage_key, None)

    # ---------------------------------------------------------------- fault hook
    def stop_server(self, backend: Any) -> None:
        """Make the real store fail (every call of the backend to it errors or times out)."""
        self._switch(backend, False)

    def start_server(self, backend: Any) -> None:
        """Bring the store back (the backend must work again within 10 s)."""
        self._switch(backend, True)

    @staticmethod
    def _switch(backend: Any, available: bool) -> None:
        switch = getattr(backend, "set_available", None)
        if not callable(switch):
            raise SideChannelUnavailable(
                f"no fault hook: no ConformanceTarget or test class implements stop_server/start_server, "
                f"and {type(backend).__name__} has no set_available()"
            )
        switch(available)

    # ---------------------------------------------------------------- description
    def describe(self, cls: type | None = None) -> str:
        """Which hooks this target provides, and which ``cls`` (the backend class) offers by duck typing."""
        own = [name for name in _HOOKS if _overrides(self, name)]
        duck = [
            f"{name}()" for name in ("raw_store", "path_for", "set_available") if callable(getattr(cls, name, None))
        ]
        on_instance = f"on the instance: {', '.join(duck)}" if duck else "none on the instance"
        if type(self) is ConformanceTarget:
            return f"no conformance target; {on_instance}"
        return f"{type(self).__qualname__} ({', '.join(own) or 'no hook of its own'}); {on_instance}"


def _overrides(target: ConformanceTarget, name: str) -> bool:
    if isinstance(target, _Adapter):
        return callable(getattr(target.inner, name, None))
    return getattr(type(target), name) is not getattr(ConformanceTarget, name)


class _Adapter(ConformanceTarget):
    """A plain object with some of the hook methods, completed with the defaults."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _own(self, name: str) -> Any:
        method = getattr(self.inner, name, None)
        return method if callable(method) else None

    def raw_store(self, backend: Any) -> MutableMapping[str, bytes]:
        own = self._own("raw_store")
        return own(backend) if own else super().raw_store(backend)

    def read_stored(self, backend: Any, storage_key: str) -> bytes | None:
        own = self._own("read_stored")
        return own(backend, storage_key) if own else super().read_stored(backend, storage_key)

    def write_stored(self, backend: Any, storage_key: str, data: bytes) -> None:
        own = self._own("write_stored")
        if own:
            own(backend, storage_key, data)
        else:
            super().write_stored(backend, storage_key, data)

    def delete_stored(self, backend: Any, storage_key: str) -> None:
        own = self._own("delete_stored")
        if own:
            own(backend, storage_key)
        else:
            super().delete_stored(backend, storage_key)

    def stop_server(self, backend: Any) -> None:
        own = self._own("stop_server")
        if own:
            own(backend)
        else:
            super().stop_server(backend)

    def start_server(self, backend: Any) -> None:
        own = self._own("start_server")
        if own:
            own(backend)
        else:
            super().start_server(backend)

    def describe(self, cls: type | None = None) -> str:
        own = [name for name in _HOOKS if _overrides(self, name)]
        return f"{type(self.inner).__qualname__} ({', '.join(own) or 'no hook of its own'})"


def as_target(value: Any) -> ConformanceTarget:
    """A :class:`ConformanceTarget` from a target instance or class, a plain hook object or class, or
    a ``"module:Name"`` path; raises :class:`BackendLoadError` when a path cannot be imported."""
    if isinstance(value, str):
        module_name, _, attr = value.partition(":")
        if not module_name or not attr:
            raise BackendLoadError(f"conformance target {value!r} is not a 'module:Name' path")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except Exception as exc:
            raise BackendLoadError(f"cannot import conformance target {value!r}: {type(exc).__name__}: {exc}") from exc
        value = obj
    if isinstance(value, type):
        value = value()
    return value if isinstance(value, ConformanceTarget) else _Adapter(value)


def find_target(backend: str | type | None, explicit: Any = None) -> tuple[ConformanceTarget, str]:
    """The hooks for ``backend`` and where they came from.

    ``explicit`` (a target, class or ``module:Name``) wins; else an entry point of
    :data:`TARGET_GROUP` named like the backend (or whose ``backend`` attribute names it); else the
    default target (duck typing on the instance).
    """
    if explicit is not None:
        return as_target(explicit), "given explicitly"
    if backend is not None:
        for entry in metadata.entry_points(group=TARGET_GROUP):
            if isinstance(backend, str) and entry.name == backend:
                try:
                    return as_target(entry.load()), f"entry point {TARGET_GROUP}:{entry.name}"
                except Exception as exc:
                    raise BackendLoadError(
                        f"conformance target entry point {entry.name!r} ({entry.value}) cannot be loaded: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
        if isinstance(backend, type):
            for entry in metadata.entry_points(group=TARGET_GROUP):
                try:
                    loaded = entry.load()
                except Exception:
                    continue
                named = getattr(loaded, "backend", None)
                if named is backend or named == f"{backend.__module__}:{backend.__qualname__}":
                    return as_target(loaded), f"entry point {TARGET_GROUP}:{entry.name}"
    return ConformanceTarget(), "none"
