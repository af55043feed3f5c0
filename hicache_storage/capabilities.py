"""What a backend declares about itself; the conformance suite gates its tests on these."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ConfigError

__all__ = ["SHARED_STORE", "Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """Declared behaviour of a backend.

    - ``zero_copy``: v1 calls move bytes straight between host-pool memory and storage.
    - ``persistent``: pages survive ``close()`` and a new instance on the same config sees them.
    - ``shared``: several processes/hosts with the same config see each other's pages.
    - ``may_evict``: stored pages may disappear on their own (a later read is a miss).
    - ``supports_delete`` / ``supports_clear``: ``delete()`` / ``clear()`` remove pages.
    - ``max_batch_size``: most pages one primitive call receives (the base class splits larger batches).
    - ``max_page_bytes``: largest page the backend can store (``None`` = unbounded).
    - ``verifies_integrity``: a corrupted or truncated stored page reads as a miss.
    - ``multi_pool``: serves the multi-pool (v2) calls for sidecar pools (Mamba state, SWA, indexer).
    - ``supports_list``: ``list_pages()`` lists the stored records (pages and key-space
      manifests) under the configured location, paged and by key-space prefix.
    - ``ttl``: the ``ttl_s`` option makes stored pages expire on their own.
    """

    zero_copy: bool = False
    persistent: bool = False
    shared: bool = False
    may_evict: bool = False
    supports_delete: bool = False
    supports_clear: bool = False
    max_batch_size: int = 128
    max_page_bytes: int | None = None
    verifies_integrity: bool = False
    multi_pool: bool = True
    supports_list: bool = False
    ttl: bool = False

    def with_overrides(self, overrides: dict[str, Any]) -> Capabilities:
        """Return a copy with ``overrides`` applied; unknown names raise :class:`ConfigError`."""
        names = {f.name for f in fields(self)}
        for key in overrides:
            if key not in names:
                raise ConfigError(f"capabilities.{key}", f"unknown capability; expected one of {sorted(names)}")
        return replace(self, **overrides)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of every capability (for reports and JSON)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: What a durable store that many processes share usually declares: pages persist and are shared,
#: delete, clear and listing work, and records check themselves. A backend adjusts it with
#: ``SHARED_STORE.with_overrides({...})``.
SHARED_STORE = Capabilities(
    persistent=True, shared=True, supports_delete=True, supports_clear=True, verifies_integrity=True, supports_list=True
)
