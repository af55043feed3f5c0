"""Access to stored pages behind a backend's back, and switching its server off and on.

The hooks live on a :class:`~hicache_storage_conformance.hooks.ConformanceTarget` (or the test
class); these functions are the defaults, found on the backend instance by duck typing:

- ``raw_store()``: a mutable mapping from storage key to the stored bytes (the ``sim`` backend);
- ``path_for(storage_key)``: the file holding a page (the ``file`` backend);
- ``set_available(flag)``: simulates the server going away and coming back.
"""

from __future__ import annotations

from typing import Any

from .hooks import ConformanceTarget, SideChannelUnavailable

__all__ = ["SideChannelUnavailable", "auto_delete", "auto_read", "auto_set_available", "auto_write"]


def _default() -> Any:
    return ConformanceTarget()


def auto_read(backend: Any, storage_key: str) -> bytes | None:
    """Stored bytes of ``storage_key`` or ``None`` when nothing is stored."""
    data: bytes | None = _default().read_stored(backend, storage_key)
    return data


def auto_write(backend: Any, storage_key: str, data: bytes) -> None:
    """Replace the stored bytes of ``storage_key`` with ``data``."""
    _default().write_stored(backend, storage_key, data)


def auto_delete(backend: Any, storage_key: str) -> None:
    """Remove the stored page of ``storage_key`` (no error when absent)."""
    _default().delete_stored(backend, storage_key)


def auto_set_available(backend: Any, available: bool) -> None:
    """Take the backend's server away (``False``) or bring it back (``True``)."""
    target = _default()
    (target.start_server if available else target.stop_server)(backend)
