"""Sidecar faults degrade to a smaller or zero hit, never to a prefix admitted without its state."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

from hybrid_support import assert_admitted, free_engine, hybrid_span, make_hybrid
from pipeline_support import PAGE_SIZE, CallerWrapper, ScriptedBackend, chain, scripted, sim_backend

from hicache_storage.errors import InvalidRequestError
from hicache_storage.pipeline import BackupDecision, BufferOnlyPipeline, PrefetchRequest, PrefetchState
from hicache_storage.plugin import BackendSetup, BatchContext, PageBuffers


class PoolFaults(ScriptedBackend):
    """Fails writes / reads of chosen (pool, bare hash) pairs."""

    def __init__(self, setup: BackendSetup[Any]) -> None:
        super().__init__(setup)
        self.fail_pool_write: set[tuple[str, str]] = set()
        self.fail_pool_read: set[tuple[str, str]] = set()

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        failed = [(context.pool, self._bare(k)) in self.fail_pool_write for k in keys]
        done = super().write_pages(
            [k for k, f in zip(keys, failed, strict=True) if not f],
            [p for p, f in zip(pages, failed, strict=True) if not f],
            context,
        )
        it = iter(done)
        return [False if f else next(it) for f in failed]

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        done = super().read_pages(keys, pages, context)
        return [
            ok and (context.pool, self._bare(k)) not in self.fail_pool_read for k, ok in zip(keys, done, strict=True)
        ]


class Unregistering(CallerWrapper):
    """A caller API that forgot the pools in ``gone``: every v2 call naming one raises."""

    gone: ClassVar[set[str]] = set()

    def _check(self, transfers: Any) -> None:
        names = {str(getattr(t, "name", "")) for t in transfers or ()}
        if names & self.gone:
            raise InvalidRequestError(f"pool {sorted(names & self.gone)} is not registered")

    def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
        self._check(pool_transfers)
        return self.storage.batch_exists_v2(keys, pool_transfers, extra_info)

    def batch_set_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        self._check(transfers)
        return self.storage.batch_set_v2(transfers, extra_info)

    def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
        self._check(transfers)
        return self.storage.batch_get_v2(transfers, extra_info)


def _two_spans(pipe: BufferOnlyPipeline, hashes: list[str]) -> list[Any]:
    pipe.enqueue_backup(hybrid_span(pipe, "a", hashes[:3]))
    pipe.enqueue_backup(hybrid_span(pipe, "b", hashes[3:], parent=hashes[2]))
    pipe.tick()
    results = pipe.poll_backups()
    free_engine(pipe, ("engine", "a"))
    free_engine(pipe, ("engine", "b"))
    return results


def _stage(pipe: BufferOnlyPipeline, request_id: str, hashes: list[str]) -> tuple[PrefetchState, int, int]:
    pipe.prefetch(PrefetchRequest(request_id, hashes))
    pipe.tick()
    status = pipe.prefetch_status(request_id)
    assert status is not None
    return status.state, status.staged_pages, status.kv_pages


def test_sidecar_write_failing_while_kv_succeeds_gives_a_smaller_hit() -> None:
    storage, backend = scripted(PoolFaults)
    pipe = make_hybrid(storage=storage)
    hashes = chain(6)
    backend.fail_pool_write = {("mamba", hashes[5])}
    results = _two_spans(pipe, hashes)
    assert [(r.status, r.stored_pages, r.components) for r in results] == [
        ("stored", 3, {"swa": 2, "mamba": 1}),
        ("partial", 3, {"swa": 2, "mamba": 0}),
    ]
    assert pipe.existence.contains("kv", hashes[5]) and not pipe.existence.contains("mamba", hashes[5])
    assert _stage(pipe, "r", hashes) == (PrefetchState.STAGED, 3, 6)
    assert_admitted(pipe, pipe.admit("r", 0), hashes, 3)
    # Both states lost: the KV is all there, but nothing is restorable.
    other = chain(4, seed=3)
    backend.fail_pool_write = {("mamba", other[2]), ("mamba", other[3])}
    _two_spans(pipe, other)
    assert _stage(pipe, "r2", other) == (PrefetchState.MISS, 0, 4)
    # The failed state had no belief: offering the span again writes it.
    assert pipe.enqueue_backup(hybrid_span(pipe, "retry", other)) is BackupDecision.ADMITTED
    backend.fail_pool_write = set()
    pipe.tick()
    assert pipe.poll_backups()[0].components == {"mamba": 1}  # KV and SWA pages were believed stored
    assert _stage(pipe, "r3", other)[:2] == (PrefetchState.STAGED, 4)
    pipe.drain()
    pipe.check_invariants()


def test_short_sidecar_read_falls_back_to_a_shorter_prefix_or_to_nothing() -> None:
    storage, backend = scripted(PoolFaults)
    pipe = make_hybrid(storage=storage)
    hashes = chain(6)
    _two_spans(pipe, hashes)
    backend.fail_pool_read = {("mamba", hashes[5])}
    assert _stage(pipe, "r", hashes) == (PrefetchState.STAGED, 3, 6)
    assert pipe.host_pool.used_pages == 3 and pipe.sidecars.by_name["mamba"].staging.used == 1
    assert_admitted(pipe, pipe.admit("r", 0), hashes, 3)
    rows = pipe.metrics.as_dict()["components"]["mamba"]
    assert rows["units_read_failed"] == 1 and rows["units_loaded"] == 1
    assert not pipe.existence.contains("mamba", hashes[5])  # forgotten: a later backup rewrites it
    # Every state unreadable, or one SWA window page: nothing is staged.
    backend.fail_pool_read = {("mamba", hashes[5]), ("swa", hashes[1])}
    assert _stage(pipe, "r2", hashes) == (PrefetchState.MISS, 0, 6)
    assert pipe.host_pool.used_pages == 0 and all(item.staging.used == 0 for item in pipe.sidecars.items)
    assert pipe.metrics.as_dict()["prefetch_read_failed_tokens"] == (3 + 6) * PAGE_SIZE
    pipe.check_invariants()


def test_short_kv_read_lands_on_the_restorable_prefix_below_it() -> None:
    storage, backend = scripted(PoolFaults)
    pipe = make_hybrid(storage=storage)
    hashes = chain(6)
    _two_spans(pipe, hashes)
    backend.fail_read = {hashes[4]}
    assert _stage(pipe, "r", hashes) == (PrefetchState.STAGED, 3, 6)
    assert_admitted(pipe, pipe.admit("r", 0), hashes, 3)
    pipe.drain()
    pipe.check_invariants()


def test_a_pool_that_disappears_mid_run_degrades_to_misses() -> None:
    inner, backend = scripted(PoolFaults)
    storage = Unregistering(inner)
    storage.gone = set()
    pipe = make_hybrid(storage=storage)
    hashes = chain(6)
    _two_spans(pipe, hashes)
    assert _stage(pipe, "before", hashes)[:2] == (PrefetchState.STAGED, 6)
    pipe.abort("before")
    # Storage loses every Mamba page (the pool was dropped and recreated empty).
    prefix = pipe.storage.pool_keyspace("mamba").prefix
    for key in [k for k in backend.records if k.startswith(prefix)]:
        del backend.records[key]
    assert _stage(pipe, "gone", hashes) == (PrefetchState.MISS, 0, 6)
    assert pipe.metrics.as_dict()["prefetch_lost_tokens"] == 6 * PAGE_SIZE
    assert not pipe.existence.contains("mamba", hashes[5])
    # The pool is unknown to the backend: v2 calls raise; lookups miss, sidecar writes fail, nothing leaks.
    storage.gone = {"mamba"}
    assert _stage(pipe, "unknown", hashes) == (PrefetchState.MISS, 0, 0)
    assert pipe.enqueue_backup(hybrid_span(pipe, "c", hashes)) is BackupDecision.ADMITTED
    pipe.tick()
    assert pipe.poll_backups()[0].status == "partial"
    assert pipe.storage_calls.errors >= 2
    pipe.check_invariants()
    # The pool comes back: the state is written again and the prefix is restorable.
    storage.gone = set()
    assert pipe.enqueue_backup(hybrid_span(pipe, "d", hashes)) is BackupDecision.ADMITTED
    pipe.tick()
    assert _stage(pipe, "back", hashes)[:2] == (PrefetchState.STAGED, 6)
    pipe.drain()
    pipe.check_invariants()


def test_malformed_v2_answers_are_misses() -> None:
    class Garbled(CallerWrapper):
        def batch_exists_v2(self, keys: list[str], pool_transfers: Any = None, extra_info: Any = None) -> Any:
            return None

        def batch_get_v2(self, transfers: Any, extra_info: Any = None) -> dict[Any, list[bool]]:
            return {t.name: [True] for t in transfers}  # one flag whatever the keys

    pipe = make_hybrid(storage=Garbled(scripted(PoolFaults)[0]))
    hashes = chain(4)
    pipe.enqueue_backup(hybrid_span(pipe, "a", hashes))
    pipe.tick()
    assert _stage(pipe, "r", hashes)[0] is PrefetchState.MISS
    pipe.check_invariants()


def test_seeded_faults_never_admit_a_prefix_without_its_state(device: str) -> None:
    storage = sim_backend(fail_get_rate=0.15, fail_set_rate=0.15, fail_exists_rate=0.1, fault_seed=5)
    pipe = make_hybrid(storage=storage, device=device, kv_pages=48, swa_pages=32, state_slots=16)
    rng = random.Random(7)
    prompts = [chain(rng.randint(2, 9), seed=s) for s in range(8)]
    admitted = 0
    asked: dict[str, tuple[list[str], int]] = {}
    for step in range(160):
        prompt = prompts[rng.randrange(len(prompts))]
        cut = rng.randint(1, len(prompt))
        if rng.random() < 0.5 and pipe.device_pool.free_pages >= cut:
            split = rng.randint(0, cut - 1)
            parent = prompt[split - 1] if split else None
            if pipe.enqueue_backup(hybrid_span(pipe, step, prompt[split:cut], parent)) is not BackupDecision.ADMITTED:
                free_engine(pipe, ("engine", step))
        else:
            splice = rng.randint(0, 2) if len(prompt) > 2 else 0
            asked[f"r{step}"] = (prompt, splice)
            pipe.prefetch(PrefetchRequest(f"r{step}", prompt, splice_point=splice * PAGE_SIZE))
        pipe.tick()
        for status in pipe.poll_prefetches():
            if status.state is PrefetchState.STAGED:
                prompt, splice = asked[status.request_id]
                admission = pipe.admit(status.request_id, splice * PAGE_SIZE)
                assert admission.pages == status.staged_pages
                assert set(admission.sidecars) == {"swa", "mamba"}
                end = splice + admission.pages
                assert list(admission.hashes) == prompt[splice:end]
                assert_admitted(pipe, admission, prompt, end)
                admitted += 1
                free_engine(pipe, status.request_id)
        for result in pipe.poll_backups():
            free_engine(pipe, ("engine", result.span_id))
        pipe.check_invariants()
    pipe.drain()
    pipe.check_invariants()
    values = pipe.metrics.as_dict()
    assert admitted > 10 and storage.get_stats()["faults"] > 10
    assert values["prefetch_lost_tokens"] > 0 and values["components"]["mamba"]["units_read_failed"] > 0
    assert pipe.metrics.as_dict()["components"]["mamba"]["units_write_failed"] > 0
