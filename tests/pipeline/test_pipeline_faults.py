"""Storage faults and outages: the pipeline never raises, never leaks, and degrades to misses."""

from __future__ import annotations

import random

from hicache_storage_sim.conformance import SimHooks
from pipeline_support import assert_holds, chain, make_pipeline, make_span, sim_backend

from hicache_storage.pipeline import BufferOnlyPipeline, PrefetchRequest, PrefetchState


def _workload(pipe: BufferOnlyPipeline, rng: random.Random, steps: int, prompts: list[list[str]]) -> int:
    """Random backups, prefetches and admissions; returns pages loaded (each checked byte for byte)."""
    loaded = 0
    for step in range(steps):
        prompt = prompts[rng.randrange(len(prompts))]
        cut = rng.randint(1, len(prompt))
        if rng.random() < 0.5 and pipe.device_pool.free_pages >= cut:
            pipe.enqueue_backup(make_span(pipe, step, prompt[:cut]))
        else:
            pipe.prefetch(PrefetchRequest(f"r{step}", prompt))
        pipe.tick()
        for status in pipe.poll_prefetches():
            if status.state is PrefetchState.STAGED and rng.random() < 0.8:
                admission = pipe.admit(status.request_id, 0)
                assert_holds(pipe.device_pool, admission.device_indices, admission.hashes)
                loaded += admission.pages
                pipe.device_pool.free(admission.device_indices)
        for result in pipe.poll_backups():
            owned = [p for p, o in pipe.device_pool.owners().items() if o == ("engine", result.span_id)]
            pipe.device_pool.free([p * 4 + i for p in owned for i in range(4)])
        pipe.check_invariants()
    return loaded


def test_seeded_faults_never_raise_or_leak(device: str) -> None:
    storage = sim_backend(fail_get_rate=0.2, fail_set_rate=0.2, fail_exists_rate=0.2, fault_seed=11)
    pipe = make_pipeline(device, storage=storage, device_pages=32, prefetch_timeout_ticks=4, storage_batch_pages=3)
    rng = random.Random(3)
    prompts = [chain(rng.randint(1, 8), seed=s) for s in range(8)]
    loaded = _workload(pipe, rng, 150, prompts)
    pipe.drain()
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0 and pipe.backlog_tokens == 0
    faults = storage.get_stats()["faults"]
    metrics = pipe.metrics.as_dict()
    assert faults > 10
    assert metrics["backup_failed_tokens"] > 0 and metrics["prefetch_miss_tokens"] > 0
    assert loaded > 0  # some reads still succeed, and each was byte-exact


def test_backend_outage_degrades_to_misses_and_recovers(device: str) -> None:
    storage = sim_backend()
    pipe = make_pipeline(device, storage=storage, device_pages=16)
    hashes = chain(4)
    span = make_span(pipe, 1, hashes)
    pipe.enqueue_backup(span)
    pipe.tick()
    pipe.device_pool.free(span.device_indices)

    SimHooks().stop_server(storage.backend)
    pipe.prefetch(PrefetchRequest("down", hashes))
    lost = chain(3, seed=4)
    down_span = make_span(pipe, 2, lost)
    pipe.enqueue_backup(down_span)
    pipe.tick()
    assert pipe.prefetch_status("down").state is PrefetchState.MISS  # type: ignore[union-attr]
    assert pipe.poll_backups()[-1].status == "failed"
    assert pipe.host_pool.used_pages == 0
    pipe.check_invariants()

    SimHooks().start_server(storage.backend)
    pipe.prefetch(PrefetchRequest("up", hashes))
    assert pipe.enqueue_backup(down_span).value == "admitted"  # no belief was recorded for the failed write
    pipe.tick()
    admission = pipe.admit("up", 0)
    assert_holds(pipe.device_pool, admission.device_indices, hashes)
    assert pipe.poll_backups()[-1].status == "stored"
    pipe.drain()
    pipe.check_invariants()
    assert pipe.host_pool.used_pages == 0


def test_backend_that_raises_is_contained() -> None:
    from pipeline_support import CallerWrapper, scripted

    class Broken(CallerWrapper):
        def batch_exists(self, keys: list[str], extra_info: object = None) -> int:
            raise RuntimeError("boom")

        def batch_set_v1(self, keys: list[str], host_indices: object, extra_info: object = None) -> list[bool]:
            return None  # type: ignore[return-value]

    pipe = make_pipeline(storage=Broken(scripted()[0]))
    pipe.enqueue_backup(make_span(pipe, 1, chain(2)))
    pipe.prefetch(PrefetchRequest("r", chain(2)))
    pipe.tick()
    assert pipe.poll_backups()[0].status == "failed"
    assert pipe.prefetch_status("r").state is PrefetchState.MISS  # type: ignore[union-attr]
    assert pipe.storage_calls.errors == 2
    pipe.check_invariants()
