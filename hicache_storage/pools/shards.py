"""Head shards: one page as ``L = tp_lcm_size`` records named by the KV heads they hold, not by the writer.

Shard ``j`` of a page holds global KV heads ``[j*H/L, (j+1)*H/L)`` of every layer, K then V, each in
the byte order ``(heads, page_size, layers, head_dim)`` (SGLang's ``page_head`` order). A rank ``r``
of a TP=T deployment holds heads ``[r*H/T, (r+1)*H/T)``, so it writes and reads shards
``r*L/T .. (r+1)*L/T - 1``; a TP=L rank finds its one shard among what a TP2 rank wrote.

On ``page_head`` a shard is one slice of K and one of V of the page (zero-copy); on the other
layouts the shard bytes are gathered into, and scattered from, a staging copy. A page is stored or
found only when every one of its shards is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..keys import KeySpace
from ..page_buffers import PageBuffers

__all__ = ["SHARDED_POOLS", "HeadShards"]

#: Pools whose pages are KV heads sharded over tp ranks (split like the main KV pool).
SHARDED_POOLS = frozenset({"kv", "swa", "auxiliary_swa", "draft", "draft_swa"})

_Array = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class HeadShards:
    """How one rank's pages of one pool split into head shards.

    - ``lcm``: shards per page (``tp_lcm_size``); ``first``/``split``: this rank's shards
      ``first .. first + split - 1``;
    - ``heads``: KV heads this rank holds; ``row_bytes``: bytes of one head of one token of one layer;
    - ``layers`` / ``page_size`` / ``layout``: the host pool's.
    """

    lcm: int
    first: int
    split: int
    heads: int
    row_bytes: int
    layers: int
    page_size: int
    layout: str

    @property
    def shard_heads(self) -> int:
        """KV heads per shard."""
        return self.heads // self.split

    @property
    def shard_bytes(self) -> int:
        """Bytes of one shard record (K and V of its heads, every layer)."""
        return 2 * self.shard_heads * self.page_size * self.layers * self.row_bytes

    @property
    def zero_copy(self) -> bool:
        """Whether shards are slices of the page (``page_head``) rather than staged copies."""
        return self.layout == "page_head"

    def storage_keys(self, space: KeySpace, keys: Sequence[str]) -> list[str]:
        """Every shard's storage key, page by page (``split`` consecutive keys per page)."""
        return space.shard_keys_unchecked(keys, range(self.first, self.first + self.split))

    def fold(self, flags: Sequence[bool]) -> list[bool]:
        """One flag per page: ``True`` only when every one of its shards' flags is."""
        split = self.split
        return [all(flags[start : start + split]) for start in range(0, len(flags), split)]

    # ------------------------------------------------------------------ bytes
    def for_write(self, pages: Sequence[PageBuffers]) -> list[PageBuffers]:
        """The shard buffers of ``pages`` to write (page by page, ``split`` per page)."""
        if self.zero_copy:
            return [shard for page in pages for shard in self._slices(page)]
        shards: list[PageBuffers] = []
        for page in pages:
            staging = np.empty(self.split * self.shard_bytes, dtype=np.uint8)
            self._move(page, staging, gather=True)
            shards.extend(self._staged(staging))
        return shards

    def for_read(
        self, pages: Sequence[PageBuffers]
    ) -> tuple[list[PageBuffers], Callable[[list[bool]], list[bool]] | None]:
        """Shard buffers to read into, and what puts the bytes of pages found whole into ``pages``
        (it returns the per-page flags it was given)."""
        if self.zero_copy:
            return [shard for page in pages for shard in self._slices(page)], None
        stagings = [np.empty(self.split * self.shard_bytes, dtype=np.uint8) for _ in pages]

        def scatter(found: list[bool]) -> list[bool]:
            for page, staging, hit in zip(pages, stagings, found, strict=True):
                if hit:
                    self._move(page, staging, gather=False)
            return found

        return [shard for staging in stagings for shard in self._staged(staging)], scatter

    def _staged(self, staging: _Array) -> list[PageBuffers]:
        size = self.shard_bytes
        return [[staging[index * size : (index + 1) * size].data] for index in range(self.split)]

    def _segments(self, page: PageBuffers) -> list[_Array]:
        """The page's native segments (K, V; or per kv per layer on ``layer_first``) as uint8 arrays."""
        count = 2 * self.layers if self.layout == "layer_first" else 2
        if len(page) == count:
            return [np.frombuffer(segment, dtype=np.uint8) for segment in page]
        if len(page) != 1:
            raise ValueError(f"a {self.layout} page has {count} segments (or one flat segment), got {len(page)}")
        flat = np.frombuffer(page[0], dtype=np.uint8)
        size = flat.size // count
        return [flat[index * size : (index + 1) * size] for index in range(count)]

    def _slices(self, page: PageBuffers) -> list[PageBuffers]:
        k, v = self._segments(page)
        size = k.size // self.split
        return [
            [k[index * size : (index + 1) * size].data, v[index * size : (index + 1) * size].data]
            for index in range(self.split)
        ]

    def _move(self, page: PageBuffers, staging: _Array, *, gather: bool) -> None:
        """Copy between the page and ``staging`` (``(split, 2, h, P, L, row)``); ``gather``: page to staging."""
        split, h, P, L, row = self.split, self.shard_heads, self.page_size, self.layers, self.row_bytes
        out = staging.reshape(split, 2, h, P, L, row)
        segments = self._segments(page)
        if self.layout == "layer_first":
            for kv in range(2):
                for layer in range(L):
                    view = segments[kv * L + layer].reshape(P, split, h, row).transpose(1, 2, 0, 3)
                    _copy(out[:, kv, :, :, layer, :], view, gather)
            return
        for kv in range(2):
            _copy(out[:, kv], self._head_major(segments[kv]).reshape(split, h, P, L, row), gather)

    def _head_major(self, segment: _Array) -> _Array:
        """One K or V segment as a ``(heads, P, L, row)`` view."""
        H, P, L, row = self.heads, self.page_size, self.layers, self.row_bytes
        if self.layout == "page_first":
            return segment.reshape(P, L, H, row).transpose(2, 0, 1, 3)
        if self.layout == "page_first_direct":
            return segment.reshape(L, P, H, row).transpose(2, 1, 0, 3)
        return segment.reshape(H, P, L, row)


def _copy(staged: _Array, page: _Array, gather: bool) -> None:
    if gather:
        staged[...] = page
    else:
        page[...] = staged
