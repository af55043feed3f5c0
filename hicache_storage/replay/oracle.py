"""The infinite-cache ceiling: prefix reuse when every block or page ever seen stays cached."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .pages import PageHasher
from .trace import TraceRequest

__all__ = ["OracleResult", "oracle_block_hits", "oracle_page_hits"]


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
        matched = 0
        while matched < len(hashes) and hashes[matched] in seen:
            matched += 1
        hits += matched * hasher.page_size
        seen.update(hashes[matched:])
    return OracleResult(hits, total, "tokens")
