"""Simulated tensor-parallel ranks fed the same events make the same decisions."""

from __future__ import annotations

import random

from pipeline_support import FakeClock, assert_holds, chain, fill, make_device_pool

from hicache_storage import load_backend, make_config
from hicache_storage.pipeline import BufferOnlyPipeline, PipelineConfig, PrefetchRequest, PrefetchState, Span

RANKS = 4


def _rank_pipeline(rank: int) -> BufferOnlyPipeline:
    extra = {"sim_op_latency_us": 0, "resilience": False, "store": "lockstep-test"}
    storage = load_backend("sim", make_config("m", tp_rank=rank, tp_size=RANKS, extra_config=extra))
    config = PipelineConfig(record_decisions=True, backlog_cap_tokens=48, prefetch_timeout_ticks=3)
    return BufferOnlyPipeline(config, make_device_pool(num_pages=24), storage, clock=FakeClock())


def test_ranks_decide_alike_and_keep_their_own_bytes() -> None:
    from hicache_storage_sim import drop_store

    ranks = [_rank_pipeline(rank) for rank in range(RANKS)]
    rng = random.Random(5)
    prompts = [chain(rng.randint(2, 9), seed=s) for s in range(10)]
    try:
        for step in range(120):
            prompt = prompts[rng.randrange(len(prompts))]
            cut = rng.randint(1, len(prompt))
            split = rng.randint(0, cut - 1)
            kind = rng.random()
            for rank, pipe in enumerate(ranks):
                if kind < 0.5:
                    _offer(pipe, rank, step, prompt[:split], prompt[split:cut])
                elif kind < 0.9:
                    pipe.prefetch(PrefetchRequest(f"r{step}", prompt))
                pipe.tick()
                for status in pipe.poll_prefetches():
                    if status.state is PrefetchState.STAGED and status.staged_pages % 2:
                        admission = pipe.admit(status.request_id, 0)
                        labels = [f"{h}/tp{rank}" for h in admission.hashes]
                        assert_holds(pipe.device_pool, admission.device_indices, labels)
                        pipe.device_pool.free(admission.device_indices)
                for result in pipe.poll_backups():
                    _free_engine(pipe, result.span_id)
        for pipe in ranks:
            pipe.drain()
            pipe.check_invariants()
    finally:
        drop_store("lockstep-test")
    logs = [pipe.decisions for pipe in ranks]
    assert len(logs[0]) > 200
    kinds = {entry[1] for entry in logs[0]}
    assert {"backup", "backup_done", "lookup", "stage", "admit"} <= kinds
    verdicts = {entry[3] for entry in logs[0] if entry[1] == "backup"}
    assert {"admitted", "skipped", "dropped_parent"} <= verdicts
    for log in logs[1:]:
        assert log == logs[0]
    dicts = [pipe.metrics.as_dict() for pipe in ranks]
    for other in dicts[1:]:
        assert {k: v for k, v in other.items() if k != "latency"} == {
            k: v for k, v in dicts[0].items() if k != "latency"
        }


def _offer(pipe: BufferOnlyPipeline, rank: int, step: int, stored_part: list[str], new_part: list[str]) -> None:
    pool = pipe.device_pool
    if not new_part or pool.free_pages < len(new_part):
        return
    tokens = pool.alloc(len(new_part) * pool.page_size, owner=("engine", step))
    assert tokens is not None
    fill(pool, tokens, [f"{h}/tp{rank}" for h in new_part])
    parent = stored_part[-1] if stored_part else None
    decision = pipe.enqueue_backup(Span(step, new_part, tokens, parent_hash=parent))
    if decision.value != "admitted":
        pool.free(tokens)


def _free_engine(pipe: BufferOnlyPipeline, span_id: object) -> None:
    pool = pipe.device_pool
    pages = [p for p, owner in pool.owners().items() if owner == ("engine", span_id)]
    pool.free([p * pool.page_size + i for p in pages for i in range(pool.page_size)])
