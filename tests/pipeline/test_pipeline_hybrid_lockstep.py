"""Lockstep ranks with sidecars: the same events give the same decisions; differing storage answers are
intersected through the rank collective so no rank restores a prefix another rank cannot."""

from __future__ import annotations

import random
import threading
from typing import Any

from hybrid_support import assert_admitted, free_engine, hybrid_span, make_hybrid
from pipeline_support import chain, scripted, sim_backend
from test_pipeline_hybrid_faults import PoolFaults

from hicache_storage import make_config
from hicache_storage.pipeline import BackupDecision, BufferOnlyPipeline, PrefetchRequest, PrefetchState
from hicache_storage.pipeline.lockstep import ThreadRankGroup


def _drive(pipe: BufferOnlyPipeline, seed: int, steps: int) -> list[tuple[str, int, int]]:
    """A seeded workload of backups, prefetches and admissions; returns what each admission got."""
    rng = random.Random(seed)
    prompts = [chain(rng.randint(2, 8), seed=s) for s in range(6)]
    got: list[tuple[str, int, int]] = []
    for step in range(steps):
        prompt = prompts[rng.randrange(len(prompts))]
        cut = rng.randint(1, len(prompt))
        if rng.random() < 0.55 and pipe.device_pool.free_pages >= cut:
            split = rng.randint(0, cut - 1)
            span = hybrid_span(pipe, step, prompt[split:cut], prompt[split - 1] if split else None)
            if pipe.enqueue_backup(span) is not BackupDecision.ADMITTED:
                free_engine(pipe, ("engine", step))
        else:  # a prompt that may end inside a stored span, where no state was saved
            pipe.prefetch(PrefetchRequest(f"r{step}", prompt[:cut]))
        pipe.tick()
        for status in pipe.poll_prefetches():
            if status.state is PrefetchState.STAGED:
                admission = pipe.admit(status.request_id, 0)
                assert_admitted(
                    pipe, admission, prompts[[p[0] for p in prompts].index(admission.hashes[0])], admission.pages
                )
                got.append((status.request_id, admission.pages, status.kv_pages))
                free_engine(pipe, status.request_id)
            elif status.state is PrefetchState.MISS:
                got.append((status.request_id, 0, status.kv_pages))
        for result in pipe.poll_backups():
            free_engine(pipe, ("engine", result.span_id))
    pipe.drain()
    pipe.check_invariants()
    return got


def test_two_ranks_fed_the_same_events_decide_alike() -> None:
    from hicache_storage_sim import drop_store

    extra = {"sim_op_latency_us": 0, "resilience": False, "store": "hybrid-lockstep"}
    ranks = [
        make_hybrid(
            storage=sim_backend(**extra) if rank == 0 else _sim_rank(rank, extra),
            kv_pages=24,
            swa_pages=16,
            state_slots=8,
            backlog_cap_tokens=40,
            prefetch_timeout_ticks=3,
        )
        for rank in range(2)
    ]
    try:
        outcomes = [_drive(pipe, seed=11, steps=140) for pipe in ranks]
    finally:
        drop_store("hybrid-lockstep")
    assert outcomes[0] == outcomes[1] and sum(1 for _, pages, _ in outcomes[0] if pages) > 10
    assert ranks[0].decisions == ranks[1].decisions and len(ranks[0].decisions) > 200
    verdicts = {entry[3] for entry in ranks[0].decisions if entry[1] == "backup"}
    assert {"admitted", "skipped", "dropped_parent"} <= verdicts
    assert any(kv > pages for _, pages, kv in outcomes[0])  # some prefixes were cut where a state was missing
    a, b = (pipe.metrics.as_dict() for pipe in ranks)
    assert {k: v for k, v in a.items() if k != "latency"} == {k: v for k, v in b.items() if k != "latency"}


def _sim_rank(rank: int, extra: dict[str, Any]) -> Any:
    from hicache_storage import load_backend

    return load_backend("sim", make_config("m", tp_rank=rank, tp_size=2, extra_config=extra))


def _rank_run(pipe: BufferOnlyPipeline, backend: PoolFaults, fault: set[Any], out: list[Any]) -> None:
    """Two spans, then two prefetches of the whole chain; ``fault`` fails reads before the second."""
    hashes = chain(6)
    pipe.enqueue_backup(hybrid_span(pipe, "a", hashes[:3]))
    pipe.enqueue_backup(hybrid_span(pipe, "b", hashes[3:], parent=hashes[2]))
    pipe.tick()
    for name in ("a", "b"):
        free_engine(pipe, ("engine", name))
    for request in ("q1", "q2"):
        if request == "q2":
            backend.fail_pool_read = fault
        pipe.prefetch(PrefetchRequest(request, hashes))
        pipe.tick()
        status = pipe.prefetch_status(request)
        assert status is not None
        admission = pipe.admit(request, 0)
        if admission.pages:
            assert_admitted(pipe, admission, hashes, admission.pages)
        out.append((request, status.state.value, status.staged_pages))
        free_engine(pipe, request)
    pipe.drain()
    pipe.check_invariants()


def _run_ranks(sync: bool) -> tuple[list[list[Any]], ThreadRankGroup]:
    """Rank 1 failed to store the state at page 6; before q2, rank 0's read of the state at page 3 fails."""
    hashes = chain(6)
    group = ThreadRankGroup(2, timeout_s=10)
    built = [scripted(PoolFaults), scripted(PoolFaults)]
    backends = [backend for _storage, backend in built]
    backends[1].fail_pool_write = {("mamba", hashes[5])}
    faults: list[set[Any]] = [{("mamba", hashes[2])}, set()]
    pipes = [
        make_hybrid(storage=storage, rank_sync=group.member(r) if sync else None)
        for r, (storage, _) in enumerate(built)
        for r, (storage, _) in enumerate(built)
    ]
    outs: list[list[Any]] = [[], []]
    failures: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            _rank_run(pipes[rank], backends[rank], faults[rank], outs[rank])
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    assert not any(thread.is_alive() for thread in threads)
    return outs, group


def test_ranks_intersect_restorable_prefixes_through_the_collective() -> None:
    outs, group = _run_ranks(sync=True)
    # q1: rank 0 could restore 6 pages, rank 1 only 3: both stage 3.
    # q2: rank 0's read of the state at 3 fails (nothing shorter is restorable): neither stages anything.
    assert outs[0] == outs[1] == [("q1", "staged", 3), ("q2", "miss", 0)]
    phases = [(rid, phase, sorted(found)) for rid, phase, found in group.history]
    assert phases == [("q1", "query", [3]), ("q1", "read", [3]), ("q2", "query", [3]), ("q2", "read", [])]
    # Without the collective the ranks disagree.
    alone, _ = _run_ranks(sync=False)
    assert alone[0] == [("q1", "staged", 6), ("q2", "staged", 6)]
    assert alone[1] == [("q1", "staged", 3), ("q2", "staged", 3)]


def test_a_rank_out_of_lockstep_breaks_the_collective() -> None:
    group = ThreadRankGroup(2, timeout_s=0.2)
    member = group.member(0)
    try:
        member.agree("r", "query", frozenset({1}))
    except threading.BrokenBarrierError:
        pass
    else:
        raise AssertionError("a collective with one rank missing must not return")
