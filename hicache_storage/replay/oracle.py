"""The infinite-cache ceiling: prefix reuse when every block or page ever seen stays cached."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..pipeline import Component
from .pages import PageHasher
from .sidecars import span_ends
from .trace import TraceRequest

__all__ = ["HybridOracle", "OracleResult", "oracle_block_hits", "oracle_hybrid", "oracle_page_hits"]


@dataclass(frozen=True)
class OracleResult:
    """Hits and totals of the infinite cache (``unit`` is ``blocks`` or ``tokens``)."""

    hits: int
    total: int
    unit: str

    @property
    def rate(self) -> float:
        """Hit fraction (0 for an empty trace)."""
        return self.hits / self.total if self.total else 0.0


def oracle_block_hits(requests: Iterable[TraceRequest]) -> OracleResult:
    """Leading blocks of each request whose whole block-id prefix occurred in an earlier request."""
    seen: set[tuple[int, ...]] = set()
    hits = total = 0
    for request in requests:
        ids = request.hash_ids
        total += len(ids)
        matched = 0
        while matched < len(ids) and ids[: matched + 1] in seen:
            matched += 1
        hits += matched
        seen.update(ids[: end + 1] for end in range(matched, len(ids)))
    return OracleResult(hits, total, "blocks")


def oracle_page_hits(
    requests: Sequence[TraceRequest], hasher: PageHasher, page_hashes: Sequence[list[str]] | None = None
) -> OracleResult:
    """Prefix-hit tokens at page granularity (full pages only) over input tokens.

    ``page_hashes`` (one list per request) avoids hashing the requests again.
    """
    seen: set[str] = set()
    hits = total = 0
    for number, request in enumerate(requests):
        hashes = page_hashes[number] if page_hashes is not None else hasher.hashes(request)
        total += request.input_length
        matched = _leading_seen(hashes, seen)
        hits += matched * hasher.page_size
        seen.update(hashes[matched:])
    return OracleResult(hits, total, "tokens")


@dataclass(frozen=True)
class HybridOracle:
    """The infinite cache of a hybrid model: a prefix counts only where KV and every sidecar's units exist.

    ``hits``: tokens of those prefixes; ``kv_hits``: tokens of the KV-only prefixes; ``lost``:
    ``kv_hits - hits``; ``lost_by_component``: tokens each sidecar alone would cut from the KV
    prefixes (they overlap when several sidecars are missing at once).
    """

    hits: int
    kv_hits: int
    total: int
    lost_by_component: dict[str, int] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        return self.kv_hits - self.hits


def oracle_hybrid(
    requests: Sequence[TraceRequest],
    hasher: PageHasher,
    page_hashes: Sequence[list[str]] | None,
    components: Sequence[Component],
    *,
    checkpoint_pages: int,
    device_pages: int | None = None,
) -> HybridOracle:
    """Replay an infinite store that keeps every KV page ever computed and every sidecar unit the engine saves.

    The engine saves sidecar state where the replay does (the end of each computed run and every
    ``checkpoint_pages`` inside it) and the store keeps all a restore there needs (an SWA
    component's whole window), so no replay can restore a prefix this oracle does not count. A
    run ends at the prompt's last full page, and also where a device of ``device_pages`` pages
    stops keeping it (a prompt longer than the device).
    """
    seen: set[str] = set()
    units: dict[str, set[str]] = {c.name: set() for c in components}
    hits = kv_hits = total = 0
    lost: dict[str, int] = {c.name: 0 for c in components}
    page = hasher.page_size
    for number, request in enumerate(requests):
        hashes = page_hashes[number] if page_hashes is not None else hasher.hashes(request)
        total += request.input_length
        kv = _leading_seen(hashes, seen)
        end = _restorable(components, units, hashes, kv)
        hits += end * page
        kv_hits += kv * page
        for component in components:
            lost[component.name] += (kv - _restorable([component], units, hashes, kv)) * page
        seen.update(hashes)
        stops = set(span_ends(end, len(hashes), checkpoint_pages))
        if device_pages is not None:
            stops.update(span_ends(end, min(len(hashes), device_pages), checkpoint_pages))
        for stop in stops:
            for component in components:
                units[component.name].update(hashes[p] for p in component.restore_positions(0, stop))
    return HybridOracle(hits, kv_hits, total, lost)


def _leading_seen(hashes: list[str], seen: set[str]) -> int:
    """How many of the leading pages of ``hashes`` are in ``seen``."""
    matched = 0
    while matched < len(hashes) and hashes[matched] in seen:
        matched += 1
    return matched


def _restorable(components: Sequence[Component], units: dict[str, set[str]], hashes: list[str], limit: int) -> int:
    for end in range(limit, 0, -1):
        if all(hashes[p] in units[c.name] for c in components for p in c.restore_positions(0, end)):
            return end
    return 0
