"""Host pages retained after staging, shared by reference count and reclaimed least recently used first."""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["BufferPageCache"]


class BufferPageCache:
    """Map of page hash → host page number with reference counts.

    A page with no references sits in a least-recently-released queue and may be reclaimed; a
    referenced page is never reclaimed. The cache does not allocate or free host memory itself:
    :meth:`insert` takes a page the caller owns and :meth:`reclaim` hands pages back to be freed.
    """

    def __init__(self) -> None:
        self._page: dict[str, int] = {}
        self._refs: dict[str, int] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._page)

    def __contains__(self, page_hash: object) -> bool:
        return page_hash in self._page

    @property
    def reclaimable(self) -> int:
        """Pages with no references."""
        return len(self._idle)

    def refcount(self, page_hash: str) -> int:
        """References held on ``page_hash`` (0 if idle or absent)."""
        return self._refs.get(page_hash, 0)

    def pages(self) -> dict[str, int]:
        """Snapshot of hash → host page number."""
        return dict(self._page)

    def insert(self, page_hash: str, page: int) -> bool:
        """Retain ``page`` (unreferenced) for ``page_hash``; ``False`` if that hash is already retained."""
        if page_hash in self._page:
            return False
        self._page[page_hash] = page
        self._refs[page_hash] = 0
        self._idle[page_hash] = None
        return True

    def acquire(self, page_hash: str) -> int | None:
        """Take a reference; the host page, or ``None`` when not retained."""
        page = self._page.get(page_hash)
        if page is None:
            return None
        self._refs[page_hash] += 1
        self._idle.pop(page_hash, None)
        return page

    def release(self, page_hash: str) -> None:
        """Drop a reference; at zero the page becomes the most recently released reclaimable one."""
        count = self._refs.get(page_hash, 0)
        if count < 1:
            raise ValueError(f"release({page_hash!r}): no reference held")
        self._refs[page_hash] = count - 1
        if count == 1:
            self._idle[page_hash] = None

    def reclaim(self, count: int) -> list[int]:
        """Remove up to ``count`` unreferenced pages, oldest release first; returns their host pages."""
        freed: list[int] = []
        while self._idle and len(freed) < count:
            page_hash, _ = self._idle.popitem(last=False)
            del self._refs[page_hash]
            freed.append(self._page.pop(page_hash))
        return freed
