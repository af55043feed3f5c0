"""End to end: back pages up, load them back elsewhere, check every byte that reaches the device."""

from __future__ import annotations

import pytest
from pipeline_support import PAGE_SIZE, assert_holds, chain, make_pipeline, make_span, sim_backend

from hicache_storage.pipeline import BackupDecision, PrefetchRequest, PrefetchState

LAYOUTS = [(layout, mla) for layout in ("layer_first", "page_first", "page_first_direct") for mla in (False, True)]
LAYOUTS += [("page_head", False)]


@pytest.mark.parametrize("lcm", [None, 2], ids=["whole", "head-shards"])
@pytest.mark.parametrize(("layout", "is_mla"), LAYOUTS)
def test_backup_then_load_back_is_byte_exact(device: str, layout: str, is_mla: bool, lcm: int | None) -> None:
    storage = sim_backend(**({"tp_lcm_size": lcm} if lcm else {}))
    pipe = make_pipeline(device, storage, layout=layout, is_mla=is_mla)
    space = storage.keyspace
    assert space is not None and space.shards == (0 if lcm is None or is_mla else lcm)
    hashes = chain(6)
    root = make_span(pipe, 1, hashes[:4])
    child = make_span(pipe, 2, hashes[4:], parent=hashes[3])
    assert pipe.enqueue_backup(root) is BackupDecision.ADMITTED
    assert pipe.enqueue_backup(child) is BackupDecision.ADMITTED
    assert pipe.backlog_tokens == 6 * PAGE_SIZE
    pipe.tick()
    results = pipe.poll_backups()
    assert [(r.span_id, r.status, r.stored_pages) for r in results] == [(1, "stored", 4), (2, "stored", 2)]
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0 and pipe.backlog_tokens == 0
    # The engine evicts the device copies and scribbles over them.
    for span in (root, child):
        pipe.device_pool.free(span.device_indices)
    pipe.device_pool.kv_buffer.fill_(0)

    # Device already has the first page; ask for the rest.
    pipe.prefetch(PrefetchRequest("r1", hashes, splice_point=PAGE_SIZE))
    pipe.tick()
    status = pipe.prefetch_status("r1")
    assert status is not None and status.state is PrefetchState.STAGED and status.staged_pages == 5
    pipe.check_invariants()
    admission = pipe.admit("r1", PAGE_SIZE)
    assert admission.hashes == tuple(hashes[1:])
    assert_holds(pipe.device_pool, admission.device_indices, hashes[1:])
    assert pipe.drain() <= 2
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0
    metrics = pipe.metrics.as_dict()
    assert metrics["prefetch_loaded_tokens"] == 5 * PAGE_SIZE
    assert metrics["backup_stored_tokens"] == 6 * PAGE_SIZE
    assert metrics["bytes_written"] == 6 * pipe.host_pool.bytes_per_page
    assert metrics["bytes_host_to_device"] == 5 * pipe.host_pool.bytes_per_page


def test_random_workload_stays_consistent(device: str) -> None:
    import random

    rng = random.Random(7)
    pipe = make_pipeline(device, device_pages=32, prefetch_timeout_ticks=5)
    prompts = [chain(rng.randint(1, 10), seed=s) for s in range(12)]
    loaded = 0
    for step in range(200):
        prompt = prompts[rng.randrange(len(prompts))]
        action = rng.random()
        if action < 0.4 and pipe.device_pool.free_pages >= len(prompt):
            span = make_span(pipe, f"s{step}", prompt)
            pipe.enqueue_backup(span)
        elif action < 0.8:
            rid = f"r{step}"
            pipe.prefetch(PrefetchRequest(rid, prompt))
        else:
            for status in [s for s in pipe.poll_prefetches() if s.state is PrefetchState.STAGED]:
                admission = pipe.admit(status.request_id, 0)
                assert_holds(pipe.device_pool, admission.device_indices, admission.hashes)
                loaded += admission.pages
                pipe.device_pool.free(admission.device_indices)
        pipe.tick()
        for result in pipe.poll_backups():
            owned = [p for p, o in pipe.device_pool.owners().items() if o == ("engine", result.span_id)]
            tokens = [p * pipe.device_pool.page_size + i for p in owned for i in range(pipe.device_pool.page_size)]
            pipe.device_pool.free(tokens)
        pipe.check_invariants()
    pipe.drain()
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0 and pipe.backlog_tokens == 0
    assert loaded > 0
