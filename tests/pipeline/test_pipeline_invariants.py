"""check_invariants() notices leaks, lost pages, wrong owners and bad counters; drain() bounds itself."""

from __future__ import annotations

import pytest
from pipeline_support import chain, make_pipeline, make_span

from hicache_storage import HostPoolError
from hicache_storage.pipeline import BufferOnlyPipeline, InvariantViolation, PrefetchRequest


def _staged_pipeline() -> BufferOnlyPipeline:
    pipe = make_pipeline()
    hashes = chain(3)
    pipe.enqueue_backup(make_span(pipe, 1, hashes))
    pipe.tick()
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    pipe.check_invariants()
    return pipe


def test_leaked_page_is_reported() -> None:
    pipe = _staged_pipeline()
    pipe.host_pool.alloc(pipe.host_pool.page_size, owner="stranger")
    with pytest.raises(InvariantViolation, match="leaked"):
        pipe.check_invariants()


def test_page_freed_while_held_is_reported_and_double_free_refused() -> None:
    pipe = _staged_pipeline()
    page = next(iter(pipe.host_pool.owners()))
    tokens = [page * pipe.host_pool.page_size + i for i in range(pipe.host_pool.page_size)]
    pipe.host_pool.free(tokens)
    with pytest.raises(InvariantViolation, match="freed while held"):
        pipe.check_invariants()
    with pytest.raises(HostPoolError):
        pipe.host_pool.free(tokens)


def test_wrong_owner_and_bad_backlog_are_reported() -> None:
    pipe = _staged_pipeline()
    page = next(iter(pipe.host_pool.owners()))
    pipe.host_pool.free([page * pipe.host_pool.page_size + i for i in range(pipe.host_pool.page_size)])
    pipe.host_pool.alloc(pipe.host_pool.page_size, owner=("load", "someone-else"))
    with pytest.raises(InvariantViolation, match="wrong owner"):
        pipe.check_invariants()
    fresh = _staged_pipeline()
    fresh._backup.backlog_tokens += 4
    with pytest.raises(InvariantViolation, match="backlog"):
        fresh.check_invariants()


def test_idle_means_nothing_allocated() -> None:
    pipe = _staged_pipeline()
    assert not pipe.idle
    assert pipe.drain() == 0
    assert pipe.idle and pipe.host_pool.used_pages == 0
    pipe.check_invariants()
