"""Access to stored pages behind a backend's back, and switching its server off and on.

A test class may implement the hooks itself (see :class:`~hicache_storage_conformance.BackendConformance`);
otherwise they are found on the backend instance by duck typing:

- ``raw_store()``: a mutable mapping from storage key to the stored bytes (the ``sim`` backend);
- ``path_for(storage_key)``: the file holding a page (the ``file`` backend);
- ``set_available(flag)``: simulates the server going away and coming back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["SideChannelUnavailable", "auto_delete", "auto_read", "auto_set_available", "auto_write"]


class SideChannelUnavailable(Exception):
    """The backend offers no way to reach its stored pages (or server) behind its back."""


def _store(backend: Any) -> Any:
    raw = getattr(backend, "raw_store", None)
    return raw() if callable(raw) else None


def _path(backend: Any, storage_key: str) -> Path | None:
    path_for = getattr(backend, "path_for", None)
    return Path(path_for(storage_key)) if callable(path_for) else None


def _missing(backend: Any) -> SideChannelUnavailable:
    return SideChannelUnavailable(
        f"{type(backend).__name__} exposes no side channel (raw_store() or path_for()) and the test class "
        "does not implement read_stored/write_stored/delete_stored"
    )


def auto_read(backend: Any, storage_key: str) -> bytes | None:
    """Stored bytes of ``storage_key`` or ``None`` when nothing is stored."""
    store = _store(backend)
    if store is not None:
        value = store.get(storage_key)
        return None if value is None else bytes(value)
    path = _path(backend, storage_key)
    if path is not None:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
    raise _missing(backend)


def auto_write(backend: Any, storage_key: str, data: bytes) -> None:
    """Replace the stored bytes of ``storage_key`` with ``data``."""
    store = _store(backend)
    if store is not None:
        store[storage_key] = bytes(data)
        return
    path = _path(backend, storage_key)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return
    raise _missing(backend)


def auto_delete(backend: Any, storage_key: str) -> None:
    """Remove the stored page of ``storage_key`` (no error when absent)."""
    store = _store(backend)
    if store is not None:
        store.pop(storage_key, None)
        return
    path = _path(backend, storage_key)
    if path is not None:
        if path.exists():
            os.remove(path)
        return
    raise _missing(backend)


def auto_set_available(backend: Any, available: bool) -> None:
    """Take the backend's server away (``False``) or bring it back (``True``)."""
    switch = getattr(backend, "set_available", None)
    if not callable(switch):
        raise SideChannelUnavailable(
            f"{type(backend).__name__} has no set_available() and the test class does not implement "
            "stop_server/start_server"
        )
    switch(available)
