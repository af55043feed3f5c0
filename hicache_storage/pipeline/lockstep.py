"""Agreement between tensor-parallel ranks on what a prefetch may restore.

Each rank asks its own storage (its own key space), so ranks may see different restorable
prefixes: a sidecar's trailing window can be stored on one rank and missing on another. A prefix
is safe to restore only where every rank can restore it, so ranks intersect their sets of
restorable prefix lengths, as SGLang does with a MIN all-reduce over one flag per length. The
pipeline calls :meth:`RankSync.agree` twice per prefetch with sidecars: after the lookup
(``phase="query"``) and after the reads (``phase="read"``). An implementation must be a
collective: every rank calls it in the same order, and it returns the intersection.
"""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["RankSync", "ThreadRankGroup"]


class RankSync(Protocol):
    """A collective over the ranks of one tensor-parallel group."""

    def agree(self, request_id: str, phase: str, lengths: frozenset[int]) -> frozenset[int]:
        """The intersection of every rank's ``lengths`` for this request and phase."""
        ...


class ThreadRankGroup:
    """An in-process group of ``size`` ranks, each driving its pipeline on its own thread.

    ``member(rank)`` is the :class:`RankSync` of one rank. A rank that waits more than
    ``timeout_s`` for the others raises ``threading.BrokenBarrierError`` (ranks out of lockstep).
    """

    def __init__(self, size: int, timeout_s: float = 10.0) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self._barrier = threading.Barrier(size, timeout=timeout_s)
        self._slots: list[tuple[str, str, frozenset[int]] | None] = [None] * size
        #: Every agreement reached, in order: (request id, phase, result).
        self.history: list[tuple[str, str, frozenset[int]]] = []

    def member(self, rank: int) -> RankSync:
        """The collective as seen by ``rank``."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside a group of {self.size}")
        return _Member(self, rank)

    def _agree(self, rank: int, request_id: str, phase: str, lengths: frozenset[int]) -> frozenset[int]:
        self._slots[rank] = (request_id, phase, lengths)
        self._barrier.wait()
        entries = [slot for slot in self._slots if slot is not None]
        if len({(rid, ph) for rid, ph, _ in entries}) != 1 or len(entries) != self.size:
            self._barrier.abort()
            raise threading.BrokenBarrierError(f"ranks out of lockstep: {[(rid, ph) for rid, ph, _ in entries]}")
        result = frozenset.intersection(*(found for _, _, found in entries))
        if self._barrier.wait() == 0:
            self.history.append((request_id, phase, result))
            self._slots = [None] * self.size
        self._barrier.wait()
        return result


class _Member:
    def __init__(self, group: ThreadRankGroup, rank: int) -> None:
        self._group = group
        self._rank = rank

    def agree(self, request_id: str, phase: str, lengths: frozenset[int]) -> frozenset[int]:
        return self._group._agree(self._rank, request_id, phase, lengths)
