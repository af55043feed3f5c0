"""Load-back: lookup, parking, read failures, splice point checks, abort and timeout."""

from __future__ import annotations

import pytest
from pipeline_support import PAGE_SIZE, assert_holds, chain, make_pipeline, make_span, scripted

from hicache_storage import InvalidRequestError
from hicache_storage.pipeline import BufferOnlyPipeline, PrefetchRequest, PrefetchState


def _store(pipe: BufferOnlyPipeline, hashes: list[str], span_id: object = "seed") -> None:
    span = make_span(pipe, str(span_id), hashes)
    pipe.enqueue_backup(span)
    pipe.tick()
    assert pipe.poll_backups()[0].status == "stored"
    pipe.device_pool.free(span.device_indices)
    pipe.device_pool.kv_buffer.zero_()


def _state(pipe: BufferOnlyPipeline, request_id: str) -> PrefetchState:
    status = pipe.prefetch_status(request_id)
    assert status is not None
    return status.state


def test_hit_prefix_only_and_miss() -> None:
    pipe = make_pipeline()
    hashes = chain(6)
    _store(pipe, hashes[:3])
    pipe.prefetch(PrefetchRequest("hit", hashes))
    pipe.prefetch(PrefetchRequest("miss", chain(3, seed=5)))
    assert _state(pipe, "hit") is PrefetchState.QUERYING
    pipe.tick()
    events = {s.request_id: (s.state, s.hit_pages, s.staged_pages) for s in pipe.poll_prefetches()}
    assert events == {"hit": (PrefetchState.STAGED, 3, 3), "miss": (PrefetchState.MISS, 0, 0)}
    assert pipe.host_pool.used_pages == 3
    metrics = pipe.metrics.as_dict()
    assert metrics["prefetch_hit_tokens"] == 3 * PAGE_SIZE
    assert metrics["prefetch_miss_tokens"] == 6 * PAGE_SIZE
    assert metrics["staged_prefetches"] == 1
    pipe.check_invariants()


def test_lookup_uses_batches_and_stops_at_first_short_batch() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=40, storage_batch_pages=4)
    hashes = chain(13)
    _store(pipe, hashes[:5])
    backend.calls.clear()
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    assert [n for op, n in backend.calls if op == "exists"] == [4, 4]
    assert [n for op, n in backend.calls if op == "read"] == [4, 1]


def test_parked_requests_are_served_in_arrival_order() -> None:
    pipe = make_pipeline(device_pages=10)  # 12 host pages
    a, b, c = chain(8, seed=1), chain(6, seed=2), chain(2, seed=3)
    for hashes in (a, b, c):
        _store(pipe, hashes, span_id=hashes[0])
    pipe.prefetch(PrefetchRequest("a", a))
    pipe.tick()
    pipe.prefetch(PrefetchRequest("b", b))
    pipe.prefetch(PrefetchRequest("c", c))  # would fit, but waits behind b
    pipe.tick()
    assert [_state(pipe, r) for r in "abc"] == [PrefetchState.STAGED, PrefetchState.PARKED, PrefetchState.PARKED]
    pipe.check_invariants()
    admission = pipe.admit("a", 0)
    assert admission.pages == 8
    assert_holds(pipe.device_pool, admission.device_indices, a)
    pipe.tick()
    assert [_state(pipe, r) for r in "bc"] == [PrefetchState.STAGED, PrefetchState.STAGED]
    assert pipe.metrics.as_dict()["prefetch_parked"] == 2


def test_read_failure_keeps_the_leading_run_and_invalidates_beliefs() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage)
    hashes = chain(5)
    _store(pipe, hashes)
    backend.fail_read = {hashes[2]}
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    status = pipe.prefetch_status("r")
    assert status is not None and status.staged_pages == 2 and status.hit_pages == 5
    assert pipe.host_pool.used_pages == 2
    assert pipe.existence.covers_all("kv", hashes[:2]) and not pipe.existence.contains("kv", hashes[2])
    assert pipe.metrics.as_dict()["prefetch_read_failed_tokens"] == 3 * PAGE_SIZE
    admission = pipe.admit("r", 0)
    assert_holds(pipe.device_pool, admission.device_indices, hashes[:2])
    # A page storage no longer has is a miss and its belief goes: a later backup rewrites it.
    backend.fail_read, backend.hidden = set(), {hashes[0]}
    pipe.prefetch(PrefetchRequest("r2", hashes))
    pipe.tick()
    assert _state(pipe, "r2") is PrefetchState.MISS
    assert not pipe.existence.contains("kv", hashes[0])
    pipe.check_invariants()


@pytest.mark.parametrize(
    ("splice_pages", "expected"),
    [(1, slice(1, 4)), (2, slice(2, 4)), (4, slice(4, 4)), (6, slice(4, 4)), (0, slice(4, 4))],
)
def test_admit_rechecks_the_splice_point(splice_pages: int, expected: slice) -> None:
    pipe = make_pipeline()
    hashes = chain(4)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes, splice_point=PAGE_SIZE))
    pipe.tick()
    admission = pipe.admit("r", splice_pages * PAGE_SIZE)
    assert admission.hashes == tuple(hashes[expected])
    assert admission.splice_point == splice_pages * PAGE_SIZE
    assert_holds(pipe.device_pool, admission.device_indices, hashes[expected])
    discarded = 3 - len(hashes[expected])
    assert pipe.metrics.as_dict()["prefetch_discarded_tokens"] == discarded * PAGE_SIZE
    assert pipe.device_pool.used_pages == len(hashes[expected])
    pipe.drain()
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0


def test_admit_trims_to_free_device_pages() -> None:
    pipe = make_pipeline()
    hashes = chain(4)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    hog = pipe.device_pool.alloc(14 * PAGE_SIZE)
    assert hog is not None
    admission = pipe.admit("r", 0)
    assert admission.hashes == tuple(hashes[:2])
    assert_holds(pipe.device_pool, admission.device_indices, hashes[:2])
    pipe.drain()
    pipe.check_invariants()


def test_abort_timeout_and_early_admission_free_everything() -> None:
    pipe = make_pipeline(prefetch_timeout_ticks=3)
    hashes = chain(4)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("aborted", hashes))
    pipe.prefetch(PrefetchRequest("slow", hashes))
    pipe.prefetch(PrefetchRequest("early", hashes))
    assert pipe.admit("early", 0).pages == 0  # not staged yet: cancelled
    pipe.tick()
    assert pipe.host_pool.used_pages == 8
    assert pipe.abort("aborted") and not pipe.abort("aborted") and not pipe.abort("unknown")
    assert pipe.host_pool.used_pages == 4
    for _ in range(2):
        pipe.tick()
        assert _state(pipe, "slow") is PrefetchState.STAGED
    pipe.tick()
    assert _state(pipe, "slow") is PrefetchState.TIMED_OUT
    assert pipe.host_pool.used_pages == 0 and pipe.idle
    assert pipe.admit("slow", 0).pages == 0
    metrics = pipe.metrics.as_dict()
    assert metrics["prefetch_timeouts"] == 1 and metrics["prefetch_aborts"] == 1
    pipe.check_invariants()


def test_bad_requests_raise() -> None:
    pipe = make_pipeline()
    with pytest.raises(ValueError, match="multiple of page_size"):
        pipe.prefetch(PrefetchRequest("r", chain(2), splice_point=3))
    with pytest.raises(ValueError, match="beyond"):
        pipe.prefetch(PrefetchRequest("r", chain(2), splice_point=3 * PAGE_SIZE))
    pipe.prefetch(PrefetchRequest("r", chain(2)))
    with pytest.raises(ValueError, match="already in progress"):
        pipe.prefetch(PrefetchRequest("r", chain(2)))


def test_drain_releases_staged_prefetches() -> None:
    pipe = make_pipeline()
    hashes = chain(3)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    assert pipe.drain(release_staged=False) == 0
    assert pipe.host_pool.used_pages == 3
    assert pipe.drain() == 0
    assert pipe.host_pool.used_pages == 0 and _state(pipe, "r") is PrefetchState.ABORTED
    pipe.check_invariants()


def _pages_of(pipe: BufferOnlyPipeline, count: int, owner: str) -> list[int]:
    tokens = pipe.device_pool.alloc(count * PAGE_SIZE, owner=owner)
    assert tokens is not None
    return (tokens[::PAGE_SIZE] // PAGE_SIZE).tolist()


def test_admit_fills_the_device_pages_the_caller_allocated() -> None:
    pipe = make_pipeline()
    hashes = chain(4)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    pages = _pages_of(pipe, 6, owner="engine")[::-1]  # any order, more than staged
    free = pipe.device_pool.free_pages
    admission = pipe.admit("r", 0, pages)
    assert admission.pages == 4 and pipe.device_pool.free_pages == free  # nothing taken from the pool
    assert (admission.device_indices[::PAGE_SIZE] // PAGE_SIZE).tolist() == pages[:4]
    assert_holds(pipe.device_pool, admission.device_indices, hashes)
    assert set(pipe.device_pool.owners().values()) == {"engine"}  # the pages stay the caller's
    pipe.drain()
    pipe.check_invariants()


def test_admit_trims_to_the_device_pages_given() -> None:
    pipe = make_pipeline()
    hashes = chain(4)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    admission = pipe.admit("r", 0, _pages_of(pipe, 2, owner="engine"))
    assert admission.hashes == tuple(hashes[:2])
    assert_holds(pipe.device_pool, admission.device_indices, hashes[:2])
    assert pipe.metrics.as_dict()["prefetch_discarded_tokens"] == 2 * PAGE_SIZE
    pipe.drain()
    pipe.check_invariants()


@pytest.mark.parametrize(
    ("pages", "message"),
    [
        ([99], "not page numbers"),
        ([-1], "not page numbers"),
        ([True], "not page numbers"),
        ("dup", "twice"),
        ("free", "not allocated"),
    ],
)
def test_admit_refuses_wrong_device_pages_and_changes_nothing(pages: object, message: str) -> None:
    pipe = make_pipeline()
    hashes = chain(2)
    _store(pipe, hashes)
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    if pages == "dup":
        pages = _pages_of(pipe, 1, owner="engine") * 2
    elif pages == "free":
        pages = [_pages_of(pipe, 1, owner="engine")[0], pipe.device_pool.page_num - 1]
    with pytest.raises(InvalidRequestError, match=message):
        pipe.admit("r", 0, pages)  # type: ignore[arg-type]
    assert _state(pipe, "r") is PrefetchState.STAGED
    pipe.check_invariants()
