"""Host staging slots: owner-tagged page allocation, retention and reclaim under pressure."""

from __future__ import annotations

from collections.abc import Sequence

from ..host_pool import HostKVPool
from .buffer_cache import BufferPageCache
from .device_pool import pages_to_tokens as token_indices
from .metrics import PipelineMetrics

__all__ = ["HostStaging", "token_indices"]


class HostStaging:
    """Allocates host pages to operations and takes them back.

    Every page is allocated with its operation's owner tag. With a :class:`BufferPageCache`, a
    valid page may be retained instead of freed; it keeps the tag of the operation that filled it
    (remembered in :attr:`retained_owner`) and is reclaimed, least recently released first, when
    an allocation would otherwise fail.
    """

    def __init__(self, pool: HostKVPool, retained: BufferPageCache | None, metrics: PipelineMetrics) -> None:
        self.pool = pool
        self.page_size = pool.page_size
        self.retained = retained
        self.retained_owner: dict[int, object] = {}
        self._metrics = metrics

    def alloc(self, count: int, owner: object) -> list[int] | None:
        """``count`` host pages tagged ``owner``, reclaiming retained pages if needed; ``None`` if full."""
        if count == 0:
            return []
        shortfall = count - self.pool.free_pages
        if shortfall > 0:
            if self.retained is None or self.retained.reclaimable < shortfall:
                return None
            freed = self.retained.reclaim(shortfall)
            self._free(freed)
            for page in freed:
                del self.retained_owner[page]
            self._metrics.add("retained_reclaimed_pages", len(freed))
        return self.pool.alloc_pages(count, owner)

    def release(self, hashes: Sequence[str], pages: Sequence[int], owned: Sequence[bool], valid: int) -> None:
        """Give back an operation's pages: the first ``valid`` hold their hash's bytes.

        Owned valid pages are retained when a cache is configured (a hash retained already keeps
        its page), other owned pages are freed, and references on retained pages are dropped.
        """
        if self.retained is None and all(owned):  # nothing to retain or dereference
            self._free(pages)
            return
        to_free: list[int] = []
        for position, (page_hash, page, own) in enumerate(zip(hashes, pages, owned, strict=True)):
            if not own:
                assert self.retained is not None
                self.retained.release(page_hash)
            elif self.retained is not None and position < valid and self.retained.insert(page_hash, page):
                self.retained_owner[page] = self.pool.owner_of(page * self.page_size)
            else:
                to_free.append(page)
        self._free(to_free)

    def release_retained(self) -> int:
        """Free every unreferenced retained page; returns how many."""
        if self.retained is None:
            return 0
        freed = self.retained.reclaim(self.retained.reclaimable)
        self._free(freed)
        for page in freed:
            del self.retained_owner[page]
        return len(freed)

    def _free(self, pages: Sequence[int]) -> None:
        if pages:
            self.pool.release_pages(pages)
