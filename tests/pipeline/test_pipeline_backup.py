"""Backup admission gates, the write budget, partial writes and the parent cascade."""

from __future__ import annotations

import pytest
from pipeline_support import PAGE_SIZE, chain, make_pipeline, make_span, scripted

from hicache_storage.pipeline import BackupDecision, PrefetchRequest, Span


def test_gate_existence_skips_stored_and_in_flight_pages() -> None:
    pipe = make_pipeline()
    hashes = chain(4)
    assert pipe.enqueue_backup(make_span(pipe, 1, hashes)) is BackupDecision.ADMITTED
    # Covered by the write already admitted.
    assert pipe.enqueue_backup(make_span(pipe, 2, hashes[:2])) is BackupDecision.SKIPPED
    pipe.tick()
    # Covered by beliefs recorded at the acknowledgement.
    assert pipe.enqueue_backup(make_span(pipe, 3, hashes)) is BackupDecision.SKIPPED
    # One new page is enough to be written again.
    extra = chain(1, seed=9)
    assert pipe.enqueue_backup(make_span(pipe, 4, [*hashes, *extra])) is BackupDecision.ADMITTED
    assert pipe.metrics.as_dict()["backup_skipped_tokens"] == 6 * PAGE_SIZE


def test_gate_parent_coverage() -> None:
    pipe = make_pipeline()
    hashes = chain(6)
    orphan = make_span(pipe, 1, hashes[2:4], parent=hashes[1])
    assert pipe.enqueue_backup(orphan) is BackupDecision.DROPPED_PARENT
    assert pipe.enqueue_backup(make_span(pipe, 2, hashes[:2])) is BackupDecision.ADMITTED
    # Parent in flight, by hash or by span id.
    assert pipe.enqueue_backup(make_span(pipe, 3, hashes[2:4], parent=hashes[1])) is BackupDecision.ADMITTED
    by_id = make_span(pipe, 4, hashes[4:])
    by_id = Span(4, by_id.hashes, by_id.device_indices, parent_id=3)
    assert pipe.enqueue_backup(by_id) is BackupDecision.ADMITTED
    pipe.tick()
    assert all(r.status == "stored" for r in pipe.poll_backups())
    # Parent believed stored.
    grandchild = chain(1, prior=hashes[-1])
    assert pipe.enqueue_backup(make_span(pipe, 5, grandchild, parent=hashes[-1])) is BackupDecision.ADMITTED
    unknown_id = make_span(pipe, 6, chain(1, seed=3))
    unknown_id = Span(6, unknown_id.hashes, unknown_id.device_indices, parent_id=99)
    assert pipe.enqueue_backup(unknown_id) is BackupDecision.DROPPED_PARENT
    assert pipe.metrics.as_dict()["backup_dropped_tokens"]["parent"] == 3 * PAGE_SIZE


def test_gate_backlog_cap_and_oversize() -> None:
    pipe = make_pipeline(device_pages=16, backlog_cap_tokens=8 * PAGE_SIZE)
    first = make_span(pipe, 1, chain(6, seed=1))
    assert pipe.enqueue_backup(first) is BackupDecision.ADMITTED
    assert pipe.enqueue_backup(make_span(pipe, 2, chain(3, seed=2))) is BackupDecision.DROPPED_BACKLOG
    assert pipe.enqueue_backup(make_span(pipe, 3, chain(2, seed=3))) is BackupDecision.ADMITTED
    assert pipe.backlog_tokens == 8 * PAGE_SIZE
    pipe.check_invariants()
    pipe.tick()
    assert pipe.backlog_tokens == 0
    # Host pool: ceil(16 * 1.2) = 20 pages; the most one tick can stage is 20 - 2 = 18 pages.
    assert pipe.host_pool.page_num == 20
    big = make_pipeline(device_pages=40, host_to_device_ratio=0.5)  # 20 host pages, 18 per tick
    assert big.enqueue_backup(make_span(big, 1, chain(18, seed=1))) is BackupDecision.ADMITTED
    assert big.enqueue_backup(make_span(big, 2, chain(19, seed=2))) is BackupDecision.DROPPED_OVERSIZE
    drops = big.metrics.as_dict()["backup_dropped_tokens"]
    assert drops == {"parent": 0, "backlog": 0, "oversize": 19 * PAGE_SIZE}
    assert pipe.metrics.as_dict()["backup_dropped_tokens"]["backlog"] == 3 * PAGE_SIZE


def test_write_through_selective_waits_for_hits() -> None:
    pipe = make_pipeline(write_policy="write_through_selective", write_through_threshold=2)
    hashes = chain(2)
    assert pipe.enqueue_backup(make_span(pipe, 1, hashes, hit_count=1)) is BackupDecision.NOT_SELECTED
    assert pipe.enqueue_backup(make_span(pipe, 2, hashes, hit_count=2)) is BackupDecision.ADMITTED


def test_fifo_flushes_within_the_write_budget_and_loads_take_priority() -> None:
    pipe = make_pipeline(device_pages=40, host_to_device_ratio=1.0)  # budget: 40 - 4 = 36 pages per tick
    spans = [make_span(pipe, i, chain(10, seed=i)) for i in range(4)]
    for span in spans:
        assert pipe.enqueue_backup(span) is BackupDecision.ADMITTED
    pipe.tick()
    assert [r.span_id for r in pipe.poll_backups()] == [0, 1, 2]
    assert pipe.backlog_tokens == 10 * PAGE_SIZE
    pipe.tick()
    assert [r.span_id for r in pipe.poll_backups()] == [3]
    for span in spans:
        pipe.device_pool.free(span.device_indices)
    # A staged prefetch holds 30 host pages: budget max(0.2*40, 40 - 30 - 4) = 8 pages.
    pipe.prefetch(PrefetchRequest("r", [h for s in spans[:3] for h in s.hashes]))
    pipe.tick()
    assert pipe.host_pool.used_pages == 30
    assert pipe._backup.budget_tokens(30 * PAGE_SIZE) == 8 * PAGE_SIZE
    for seed, (span_id, pages) in enumerate((("a", 1), ("b", 1), ("c", 1), ("d", 6))):
        pipe.enqueue_backup(make_span(pipe, span_id, chain(pages, seed=30 + seed)))
    pipe.tick()
    assert [r.span_id for r in pipe.poll_backups()] == ["a", "b", "c"]
    pipe.tick()
    assert [r.span_id for r in pipe.poll_backups()] == ["d"]
    pipe.check_invariants()


def test_head_of_line_waits_when_host_memory_is_short() -> None:
    pipe = make_pipeline(device_pages=40)  # host 48 pages
    stored = [make_span(pipe, i, chain(10, seed=i)) for i in range(4)]
    for span in stored:
        pipe.enqueue_backup(span)
    pipe.tick()
    pipe.poll_backups()
    for span in stored:
        pipe.device_pool.free(span.device_indices)
    pipe.prefetch(PrefetchRequest("r", [h for s in stored for h in s.hashes]))
    pipe.tick()
    assert pipe.host_pool.free_pages == 8
    assert pipe.enqueue_backup(make_span(pipe, "a", chain(9, seed=20))) is BackupDecision.ADMITTED
    assert pipe.enqueue_backup(make_span(pipe, "b", chain(1, seed=21))) is BackupDecision.ADMITTED
    pipe.tick()
    assert pipe.poll_backups() == []  # "a" does not fit; "b" keeps its place behind it
    assert pipe.backlog_tokens == 10 * PAGE_SIZE
    pipe.check_invariants()
    assert pipe.abort("r")
    pipe.tick()
    assert [r.span_id for r in pipe.poll_backups()] == ["a", "b"]
    pipe.check_invariants()


def test_failed_write_records_only_the_leading_stored_run_and_drops_children() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage)
    hashes = chain(7)
    backend.fail_write = {hashes[2]}
    root = make_span(pipe, 1, hashes[:4])
    child = make_span(pipe, 2, hashes[4:6], parent=hashes[3])
    grandchild = make_span(pipe, 3, hashes[6:], parent=hashes[5])
    for span in (root, child, grandchild):
        assert pipe.enqueue_backup(span) is BackupDecision.ADMITTED
    pipe.tick()
    results = {r.span_id: (r.status, r.stored_pages) for r in pipe.poll_backups()}
    assert results == {1: ("partial", 2), 2: ("dropped_parent", 0), 3: ("dropped_parent", 0)}
    # The spans went out in one call: the pages after the failed one were really written too, but
    # only the leading run is believed.
    assert backend.calls == [("write", 7)]
    assert pipe.existence.covers_all("kv", hashes[:2])
    assert not any(pipe.existence.contains("kv", h) for h in hashes[2:])
    assert backend.stored_bare() == set(hashes) - {hashes[2]}
    assert pipe.metrics.as_dict()["backup_dropped_tokens"]["parent"] == 3 * PAGE_SIZE
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0 and pipe.backlog_tokens == 0
    # Retrying after the fault heals: everything is admitted again and stored.
    backend.fail_write = set()
    again = make_span(pipe, 4, hashes[:4])
    assert pipe.enqueue_backup(again) is BackupDecision.ADMITTED
    pipe.tick()
    assert pipe.poll_backups()[0].status == "stored"


def test_child_queued_behind_a_failed_parent_is_not_written() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=40, host_to_device_ratio=1.0)  # 36 pages per tick
    hashes = chain(40)
    backend.fail_write = {hashes[2]}
    assert pipe.enqueue_backup(make_span(pipe, 1, hashes[:30])) is BackupDecision.ADMITTED
    assert pipe.enqueue_backup(make_span(pipe, 2, hashes[30:], parent=hashes[29])) is BackupDecision.ADMITTED
    pipe.tick()
    assert [(r.span_id, r.status, r.stored_pages) for r in pipe.poll_backups()] == [(1, "partial", 2)]
    pipe.tick()  # the child waited for the next tick: its parent is uncovered, so it is not sent
    assert [(r.span_id, r.status) for r in pipe.poll_backups()] == [(2, "dropped_parent")]
    assert backend.calls == [("write", 30)]
    assert not backend.stored_bare() & set(hashes[30:])
    pipe.check_invariants()


def test_spans_ready_together_go_out_in_one_call_per_batch() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=40, storage_batch_pages=4)
    hashes = chain(9)
    parents = [None, hashes[2], hashes[5]]
    for number, parent in enumerate(parents):
        span = make_span(pipe, number, hashes[3 * number : 3 * number + 3], parent=parent)
        assert pipe.enqueue_backup(span) is BackupDecision.ADMITTED
    pipe.tick()
    assert [(r.status, r.stored_pages) for r in pipe.poll_backups()] == [("stored", 3)] * 3
    assert backend.calls == [("write", 4), ("write", 4), ("write", 1)]
    assert pipe.storage.get_stats()["ops"]["set"]["calls"] == 3
    assert pipe.existence.covers_all("kv", hashes)
    pipe.check_invariants()


def test_a_page_in_two_spans_of_one_batch_is_written_once() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=40)
    hashes = chain(5)
    assert pipe.enqueue_backup(make_span(pipe, 1, hashes[:4])) is BackupDecision.ADMITTED
    assert pipe.enqueue_backup(make_span(pipe, 2, hashes)) is BackupDecision.ADMITTED  # one new page
    pipe.tick()
    assert [(r.status, r.stored_pages) for r in pipe.poll_backups()] == [("stored", 4), ("stored", 5)]
    assert backend.calls == [("write", 5)]
    assert pipe.metrics.as_dict()["backup_stored_tokens"] == 9 * PAGE_SIZE
    pipe.check_invariants()


def test_writes_go_out_in_batches_of_at_most_storage_batch_pages() -> None:
    storage, backend = scripted()
    pipe = make_pipeline(storage=storage, device_pages=40, storage_batch_pages=4)
    pipe.enqueue_backup(make_span(pipe, 1, chain(10)))
    pipe.tick()
    assert [n for op, n in backend.calls if op == "write"] == [4, 4, 2]


def test_invalid_span_raises() -> None:
    pipe = make_pipeline()
    tokens = pipe.device_pool.alloc(2 * PAGE_SIZE)
    assert tokens is not None
    with pytest.raises(ValueError, match="hashes"):
        pipe.enqueue_backup(Span(1, chain(3), tokens))
    with pytest.raises(ValueError, match="page-aligned"):
        pipe.enqueue_backup(Span(1, chain(2), tokens + 1))
    assert pipe.backlog_tokens == 0
