from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from replay_support import synthetic_requests

from hicache_storage.keys import page_hashes
from hicache_storage.replay.oracle import oracle_block_hits, oracle_page_hits
from hicache_storage.replay.pages import PageHasher, page_contents
from hicache_storage.replay.trace import TraceRequest, read_trace

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "conversation_trace.jsonl"


def request(ids: list[int], length: int) -> TraceRequest:
    return TraceRequest(0, 1, 0.0, length, 1, tuple(ids))


def test_hashes_are_sglang_chain_over_synthetic_tokens() -> None:
    hasher = PageHasher(page_size=4, block_tokens=8)
    tokens = [7 * 8 + i for i in range(8)] + [9 * 8 + i for i in range(8)]
    assert hasher.hashes(request([7, 9], 16)) == page_hashes(tokens, 4)


def test_equal_prefixes_share_pages_and_partial_blocks_hash_full_pages_only() -> None:
    hasher = PageHasher(page_size=4, block_tokens=8)
    full = hasher.hashes(request([0, 1, 2], 24))
    partial = hasher.hashes(request([0, 1, 2], 22))  # last block: 6 tokens -> one full page
    other = hasher.hashes(request([0, 5, 2], 24))
    assert partial == full[:5]
    assert other[:2] == full[:2] and not set(other[2:]) & set(full)


def test_page_size_must_divide_block() -> None:
    with pytest.raises(ValueError, match="divisor"):
        PageHasher(page_size=48, block_tokens=512)


def test_page_contents_repeat_the_digest() -> None:
    h = "ab" * 32
    content = page_contents([h], 80)
    assert content.shape == (1, 80) and np.all(content == 0xAB)


def test_oracle_on_synthetic_trace() -> None:
    requests = synthetic_requests()
    blocks = oracle_block_hits(requests)
    assert (blocks.hits, blocks.total) == (4, 12)
    tokens = oracle_page_hits(requests, PageHasher(4, 8))
    assert (tokens.hits, tokens.total) == (32, 96)


def test_oracle_counts_only_the_prefix() -> None:
    requests = [request([0, 1, 2], 24), request([5, 1, 2], 24), request([0, 1, 9], 24)]
    assert oracle_block_hits(requests).hits == 2


@pytest.mark.skipif(not TRACE.exists(), reason="conversation trace not present")
def test_oracle_reproduces_full_trace_ceiling() -> None:
    result = oracle_block_hits(read_trace(TRACE))
    assert result.total == 288_500
    assert round(result.rate * 100, 1) == 36.6
