"""Page hashes and page contents of trace requests.

Every block id expands into ``block_tokens`` synthetic token ids, ``block_id * block_tokens + i``
(mod 2**32), and the prompt's full pages are hashed with SGLang's SHA-256 chain
(:func:`hicache_storage.keys.page_hashes`), so equal block prefixes give equal page hashes and a
partial last block shares its full pages with the complete block of the same id. The trailing
partial page is not hashed: it is always recomputed, as in SGLang.

A page's content is its hash digest repeated to the page size, so every loaded page can be checked.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..keys import chain_digests
from .trace import TraceRequest

__all__ = ["PageHasher", "page_content", "page_contents"]

_TOKEN_MASK = 0xFFFFFFFF


class PageHasher:
    """Full-page hashes of a request's prompt for ``page_size`` (which must divide ``block_tokens``)."""

    def __init__(self, page_size: int, block_tokens: int = 512) -> None:
        if page_size < 1 or block_tokens < 1 or block_tokens % page_size:
            raise ValueError(f"page_size {page_size} must be a positive divisor of block_tokens {block_tokens}")
        self.page_size = page_size
        self.block_tokens = block_tokens

    def block_tokens_of(self, request: TraceRequest) -> list[int]:
        """Tokens of each block of ``request`` (the last one may be partial)."""
        blocks = len(request.hash_ids)
        last = request.input_length - (blocks - 1) * self.block_tokens
        return [self.block_tokens] * (blocks - 1) + [last]

    def tokens(self, block_id: int, count: int) -> bytes:
        """The synthetic token ids of the first ``count`` tokens of block ``block_id`` (uint32 LE)."""
        start = block_id * self.block_tokens
        ids = (np.arange(start, start + count, dtype=np.uint64) & _TOKEN_MASK).astype("<u4")
        return ids.tobytes()

    def hashes(self, request: TraceRequest) -> list[str]:
        """Hex page hashes of the prompt's full pages, in order (one chain across the blocks)."""
        result: list[str] = []
        prior: bytes | None = None
        for block_id, count in zip(request.hash_ids, self.block_tokens_of(request), strict=True):
            digests = chain_digests(self.tokens(block_id, count - count % self.page_size), self.page_size, prior)
            if digests:
                prior = digests[-1]
                result.extend(digest.hex() for digest in digests)
        return result


def page_content(page_hash: str, nbytes: int) -> npt.NDArray[np.uint8]:
    """The expected bytes of the page ``page_hash``: its digest repeated to ``nbytes``."""
    return np.resize(np.frombuffer(bytes.fromhex(page_hash), dtype=np.uint8), nbytes)


def page_contents(page_hashes: list[str], nbytes: int) -> npt.NDArray[np.uint8]:
    """Expected bytes of several pages, shape ``(len(page_hashes), nbytes)``."""
    digests = np.frombuffer(bytes.fromhex("".join(page_hashes)), dtype=np.uint8).reshape(len(page_hashes), 32)
    return np.tile(digests, (1, -(-nbytes // 32)))[:, :nbytes]
