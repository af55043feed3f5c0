"""retain_staged_pages: staged pages kept in host memory serve later reads without storage I/O."""

from __future__ import annotations

from pipeline_support import assert_holds, chain, make_pipeline, make_span, scripted

from hicache_storage.pipeline import BufferOnlyPipeline, PrefetchRequest, PrefetchState


def test_retained_pages_skip_storage_reads_and_are_reclaimed_under_pressure() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=10, retain_staged_pages=True)  # 12 host pages
    hashes = chain(4)
    span = make_span(pipe, 1, hashes)
    pipe.enqueue_backup(span)
    pipe.tick()
    pipe.poll_backups()
    pipe.device_pool.free(span.device_indices)
    pipe.device_pool.kv_buffer.zero_()
    assert pipe.buffer_cache is not None and len(pipe.buffer_cache) == 4  # written pages retained
    pipe.check_invariants()
    assert pipe.drain() == 0 and pipe.host_pool.used_pages == 4  # idle: only retained pages remain
    pipe.check_invariants()

    backend.calls.clear()
    pipe.prefetch(PrefetchRequest("r1", hashes))
    pipe.prefetch(PrefetchRequest("r2", hashes))
    pipe.tick()
    assert [op for op, _ in backend.calls] == ["exists", "exists"]  # no reads
    assert pipe.buffer_cache.refcount(hashes[0]) == 2
    pipe.check_invariants()
    first = pipe.admit("r1", 0)
    assert_holds(pipe.device_pool, first.device_indices, hashes)
    pipe.device_pool.free(first.device_indices)
    second = pipe.admit("r2", 0)
    assert_holds(pipe.device_pool, second.device_indices, hashes)
    pipe.tick()
    assert pipe.metrics.as_dict()["retained_hit_pages"] == 8
    assert pipe.buffer_cache.reclaimable == 4
    pipe.check_invariants()

    # A 10-page read needs more than the 8 free pages: the idle retained pages are reclaimed.
    other = chain(10, seed=3)
    pipe.device_pool.free(second.device_indices)
    stored = make_span(pipe, 2, other)
    pipe.enqueue_backup(stored)
    pipe.tick()
    assert pipe.metrics.as_dict()["retained_reclaimed_pages"] == 2  # 10 pages to stage, 8 free
    pipe.device_pool.free(stored.device_indices)
    pipe.release_retained()
    pipe.prefetch(PrefetchRequest("r3", hashes))  # retain 4 pages again through a read
    pipe.tick()
    pipe.admit("r3", 0)
    pipe.device_pool.free(_engine_pages(pipe))
    pipe.tick()
    pipe.prefetch(PrefetchRequest("r4", other))
    pipe.tick()
    status = pipe.prefetch_status("r4")
    assert status is not None and status.state is PrefetchState.STAGED and status.staged_pages == 10
    assert pipe.metrics.as_dict()["retained_reclaimed_pages"] == 4
    pipe.check_invariants()
    pipe.drain()
    pipe.check_invariants()
    pipe.release_retained()
    assert pipe.host_pool.used_pages == 0


def _engine_pages(pipe: BufferOnlyPipeline) -> list[int]:
    pool = pipe.device_pool
    return [p * pool.page_size + i for p in pool.owners() for i in range(pool.page_size)]
