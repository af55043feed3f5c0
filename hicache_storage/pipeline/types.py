"""Values exchanged between an engine and the pipeline."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "Admission",
    "BackupDecision",
    "BackupResult",
    "PrefetchRequest",
    "PrefetchState",
    "PrefetchStatus",
    "Span",
]


@dataclass(frozen=True)
class Span:
    """A run of full pages the engine offers for backup.

    ``hashes`` are the pages' hash-chain keys; ``device_indices`` the device-pool token indices
    holding them (``len(hashes) * page_size`` entries, page aligned). The parent is the span whose
    last page precedes this one: ``parent_id`` and/or ``parent_hash`` (its last page hash); both
    ``None`` means the span starts at the root. ``hit_count`` feeds ``write_through_selective``.
    ``sidecars`` maps a sidecar component's name to the device slot indices of the units its rule
    backs up (an SWA component: the span's trailing window pages, or all the span's pages; a
    Mamba component: the one state slot at the span's end); a sidecar left out is not backed up
    for this span. The device slots must stay valid until the span's :class:`BackupResult` is polled.
    """

    span_id: int | str
    hashes: Sequence[str]
    device_indices: torch.Tensor
    parent_id: int | str | None = None
    parent_hash: str | None = None
    hit_count: int = 0
    sidecars: Mapping[str, torch.Tensor] = field(default_factory=dict)

    @property
    def is_root(self) -> bool:
        """Whether the span starts at the root of the prefix tree."""
        return self.parent_id is None and self.parent_hash is None


class BackupDecision(str, enum.Enum):
    """What :meth:`BufferOnlyPipeline.enqueue_backup` did with a span."""

    ADMITTED = "admitted"
    SKIPPED = "skipped"  # every page already believed stored or being written
    NOT_SELECTED = "not_selected"  # write_through_selective: hit_count below the threshold
    DROPPED_PARENT = "dropped_parent"
    DROPPED_BACKLOG = "dropped_backlog"
    DROPPED_OVERSIZE = "dropped_oversize"

    @property
    def gate(self) -> str | None:
        """Gate name of a drop (``parent``, ``backlog``, ``oversize``), else ``None``."""
        return self.value.removeprefix("dropped_") if self.value.startswith("dropped_") else None


@dataclass(frozen=True)
class BackupResult:
    """Outcome of an admitted span: ``stored_pages`` is the leading run of KV pages stored.

    ``status`` is ``stored`` (every KV page and every sidecar unit), ``partial``, ``failed``
    (nothing) or ``dropped_parent`` (its parent's write failed before this span was launched).
    ``components``: sidecar units stored, per sidecar written for this span.
    """

    span_id: int | str
    status: str
    stored_pages: int
    pages: int
    components: dict[str, int] = field(default_factory=dict)


class PrefetchState(str, enum.Enum):
    """Lifecycle of a prefetch."""

    QUERYING = "querying"  # waiting for the next tick's existence query
    PARKED = "parked"  # hit known, waiting for host slots
    STAGED = "staged"  # pages in host memory, waiting for admit()
    MISS = "miss"  # nothing to load
    ADMITTED = "admitted"
    ABORTED = "aborted"
    TIMED_OUT = "timed_out"

    @property
    def final(self) -> bool:
        """Whether the request holds no resources any more."""
        return self not in (PrefetchState.QUERYING, PrefetchState.PARKED, PrefetchState.STAGED)


@dataclass(frozen=True)
class PrefetchRequest:
    """A request whose prompt pages may be in storage.

    ``hashes`` are the page hashes of the prompt's full pages; ``splice_point`` is how many tokens
    (a multiple of the page size) the device prefix cache already holds, so the lookup starts at
    page ``splice_point // page_size``.
    """

    request_id: str
    hashes: Sequence[str]
    splice_point: int = 0


@dataclass(frozen=True)
class PrefetchStatus:
    """Where a prefetch stands: ``hit_pages`` found in storage, ``staged_pages`` held in host memory.

    ``kv_pages``: KV pages found in storage beyond the splice point; with sidecars it may exceed
    ``hit_pages`` when a sidecar's units are missing where the KV run ends.
    """

    request_id: str
    state: PrefetchState
    hit_pages: int
    staged_pages: int
    kv_pages: int = 0


@dataclass
class Admission:
    """Pages loaded into the device at admission.

    ``device_indices`` (token indices, owned by the engine from now on: of the destination pages
    passed to ``admit``, or of pages allocated from the pipeline's device pool with the request
    id as owner) hold pages ``hashes`` that continue the prefix at ``splice_point`` tokens.
    ``ready`` is a CUDA event the consumer stream already waits on (``None`` on CPU).
    ``sidecars``: per sidecar component, the device slot indices now
    holding its units for the restored prefix (owned by the engine, allocated from that
    component's device pool), in the order of the component's restore positions.
    """

    request_id: str
    splice_point: int
    hashes: tuple[str, ...]
    device_indices: torch.Tensor
    ready: Any = field(default=None, repr=False)
    sidecars: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        """Number of pages loaded."""
        return len(self.hashes)
