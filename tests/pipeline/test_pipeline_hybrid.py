"""Pools with sidecars: KV + SWA window + Mamba state staged, written, restored and admitted together."""

from __future__ import annotations

import re

import pytest
from hybrid_support import (
    WINDOW,
    assert_admitted,
    free_engine,
    hybrid_pools,
    hybrid_span,
    label,
    make_hybrid,
    make_state_device,
    make_swa_device,
    sidecar,
)
from pipeline_support import PAGE_SIZE, chain, make_device_pool, scripted, sim_backend

from hicache_storage import ConfigError, HostPoolError
from hicache_storage.pipeline import (
    BackupDecision,
    BufferOnlyPipeline,
    InvariantViolation,
    PipelineConfig,
    PrefetchRequest,
    PrefetchState,
)
from hicache_storage.pipeline.components import MambaComponent, PoolSet, SWAComponent


def _store(pipe: BufferOnlyPipeline, spans: list[list[str]]) -> None:
    """Back up consecutive spans of one chain, then free their device units."""
    parent = None
    for number, hashes in enumerate(spans):
        assert pipe.enqueue_backup(hybrid_span(pipe, f"s{number}", hashes, parent)) is BackupDecision.ADMITTED
        parent = hashes[-1]
    pipe.tick()
    assert all(result.status == "stored" for result in pipe.poll_backups())
    for number in range(len(spans)):
        free_engine(pipe, ("engine", f"s{number}"))


def _staged(pipe: BufferOnlyPipeline, request_id: str, hashes: list[str], splice: int = 0) -> tuple[int, int]:
    pipe.prefetch(PrefetchRequest(request_id, hashes, splice_point=splice * PAGE_SIZE))
    pipe.tick()
    status = pipe.prefetch_status(request_id)
    assert status is not None
    return status.staged_pages, status.kv_pages


def test_round_trip_restores_every_component(device: str) -> None:
    pipe = make_hybrid(device=device)
    hashes = chain(7)
    _store(pipe, [hashes[:3], hashes[3:]])
    assert _staged(pipe, "r", hashes) == (7, 7)
    admission = pipe.admit("r", 0)
    assert admission.pages == 7 and set(admission.sidecars) == {"swa", "mamba"}
    assert_admitted(pipe, admission, hashes, 7)
    rows = pipe.metrics.as_dict()["components"]
    assert rows["swa"]["units_written"] == 2 * WINDOW and rows["mamba"]["units_written"] == 2
    assert rows["swa"]["units_loaded"] == WINDOW and rows["mamba"]["units_loaded"] == 1
    pipe.drain()
    pipe.check_invariants()
    assert all(item.staging.used == 0 for item in pipe.sidecars.items) and pipe.host_pool.used_pages == 0


def test_backups_write_the_trailing_window_and_the_end_state_only() -> None:
    pipe = make_hybrid()
    hashes = chain(6)
    _store(pipe, [hashes])
    stored = pipe.storage.get_stats()["ops"]["set"]
    swa, mamba = sidecar(pipe, "swa"), sidecar(pipe, "mamba")
    # 6 KV pages, the last 2 SWA pages and one state.
    expected = 6 * pipe.device_pool.bytes_per_page + WINDOW * swa.unit_bytes + mamba.unit_bytes
    assert stored["pages"] == 6 + WINDOW + 1 and stored["bytes"] == expected
    assert pipe.existence.contains("mamba", hashes[-1]) and not pipe.existence.contains("mamba", hashes[-2])
    assert pipe.existence.covers_all("swa", hashes[-WINDOW:]) and not pipe.existence.contains("swa", hashes[0])


def test_spans_of_one_tick_write_every_pool_in_one_call_each() -> None:
    storage, backend = scripted()
    pipe = make_hybrid(storage=storage)
    hashes = chain(9)
    _store(pipe, [hashes[:3], hashes[3:6], hashes[6:]])
    # One batch_set_v2 (the SWA windows, then the states), then one batch_set_v1 of every KV page.
    assert backend.calls == [("write", 3 * WINDOW), ("write", 3), ("write", 9)]
    assert pipe.storage.get_stats()["ops"]["set"]["calls"] == 3  # counted per pool
    assert all(pipe.existence.contains("mamba", hashes[end - 1]) for end in (3, 6, 9))
    assert _staged(pipe, "r", hashes) == (9, 9)
    assert_admitted(pipe, pipe.admit("r", 0), hashes, 9)
    pipe.drain()
    pipe.check_invariants()


def test_prefixes_are_restorable_only_at_span_ends() -> None:
    pipe = make_hybrid()
    hashes = chain(8)
    _store(pipe, [hashes[:3], hashes[3:]])
    # A prompt that leaves the chain after page 6: KV runs to 6, but state exists only at 3 and 8.
    other = [*hashes[:6], *chain(2, seed=9)]
    assert _staged(pipe, "mid", other) == (3, 6)
    assert_admitted(pipe, pipe.admit("mid", 0), hashes, 3)
    assert pipe.metrics.as_dict()["prefetch_lost_tokens"] == 3 * PAGE_SIZE
    # A prompt ending inside the first span has no restorable prefix at all.
    assert _staged(pipe, "short", hashes[:2]) == (0, 2)
    assert pipe.prefetch_status("short").state is PrefetchState.MISS  # type: ignore[union-attr]
    pipe.drain()
    pipe.check_invariants()


def test_lookup_after_a_splice_point_checks_the_whole_window() -> None:
    storage, backend = scripted()
    pipe = make_hybrid(storage=storage, window=3)
    hashes = chain(8)
    _store(pipe, [hashes[:4], hashes[4:]])
    # The device holds 6 pages; prefix 8's window (pages 5..7) reaches below the splice point.
    assert _staged(pipe, "r", hashes, splice=6) == (2, 2)
    admission = pipe.admit("r", 6 * PAGE_SIZE)
    assert admission.hashes == tuple(hashes[6:])
    assert_admitted(pipe, admission, hashes, 8)
    # With one window page gone, prefix 8 is not restorable, and prefix 4 is behind the splice point.
    del backend.records[next(k for k in backend.records if hashes[5] in k and _pool_of(pipe, k) == "swa")]
    assert _staged(pipe, "r2", hashes, splice=6) == (0, 2)
    pipe.drain()
    pipe.check_invariants()


def _pool_of(pipe: BufferOnlyPipeline, key: str) -> str:
    return next(name for name in ("swa", "mamba", "kv") if key.startswith(pipe.storage.pool_keyspace(name).prefix))


def test_kv_believed_stored_still_writes_a_missing_state() -> None:
    pipe = make_hybrid()
    hashes = chain(6)
    _store(pipe, [hashes])
    kv_bytes = pipe.metrics.as_dict()["bytes_written"]
    # The first 4 pages again (a node split): KV and the SWA window are not all believed, state at 4 is not.
    span = hybrid_span(pipe, "split", hashes[:4])
    assert pipe.enqueue_backup(span) is BackupDecision.ADMITTED
    pipe.tick()
    result = pipe.poll_backups()[0]
    assert result.status == "stored" and result.components == {"swa": WINDOW, "mamba": 1}
    assert pipe.metrics.as_dict()["bytes_written"] == kv_bytes  # no KV page written twice
    assert pipe.enqueue_backup(hybrid_span(pipe, "again", hashes[:4])) is BackupDecision.SKIPPED
    free_engine(pipe, ("engine", "split"))
    assert _staged(pipe, "r", [*hashes[:4], *chain(1, seed=4)]) == (4, 4)
    pipe.drain()


def test_span_without_a_sidecar_backs_up_kv_only() -> None:
    pipe = make_hybrid()
    hashes = chain(4)
    span = hybrid_span(pipe, 1, hashes, with_mamba=False)
    assert pipe.enqueue_backup(span) is BackupDecision.ADMITTED
    pipe.tick()
    assert pipe.poll_backups()[0].components == {"swa": WINDOW}
    assert _staged(pipe, "r", hashes) == (0, 4)  # KV stored, no state: nothing restorable
    with pytest.raises(ValueError, match="unknown sidecar"):
        pipe.enqueue_backup(type(span)(2, hashes, span.device_indices, sidecars={"indexer": span.device_indices}))
    with pytest.raises(ValueError, match="needs 2 units"):
        short = hybrid_span(pipe, 3, chain(3, seed=2))
        pipe.enqueue_backup(
            type(short)(3, short.hashes, short.device_indices, sidecars={"swa": short.sidecars["swa"][:4]})
        )


def test_host_arena_must_fit_two_minimum_transfers_of_every_component() -> None:
    pools = PoolSet(make_device_pool(num_pages=16), [SWAComponent(make_swa_device(4), window_pages=3)])
    with pytest.raises(ConfigError) as info:
        BufferOnlyPipeline(PipelineConfig(), pools, sim_backend())  # 5 host SWA pages < 2 windows of 3
    assert info.value.option == "component 'swa'"
    text = str(info.value)
    assert re.search(r"host arena of 5 units \(640 bytes\).*two minimum transfers of 3 units \(384 bytes each\)", text)
    kv_only = make_device_pool(num_pages=1)
    assert BufferOnlyPipeline(PipelineConfig(), kv_only, sim_backend()).host_pool.page_num == 2  # ceil(1.2): fits
    with pytest.raises(ConfigError, match="component 'kv'"):
        BufferOnlyPipeline(PipelineConfig(host_to_device_ratio=0.5), make_device_pool(num_pages=1), sim_backend())
    with pytest.raises(ConfigError, match="used twice"):
        PoolSet(make_device_pool(), [MambaComponent(make_state_device()), MambaComponent(make_state_device())])


def test_backlog_cap_is_per_component_and_drops_carry_it() -> None:
    # Cap ratio 0.5 (64 of 128 device tokens): 16 KV pages, but 4 of the 8 device state slots.
    pipe = make_hybrid(kv_pages=32, state_slots=8, backlog_cap_tokens=64)
    decisions = [pipe.enqueue_backup(hybrid_span(pipe, number, chain(1, seed=number))) for number in range(5)]
    assert decisions[:4] == [BackupDecision.ADMITTED] * 4 and decisions[4] is BackupDecision.DROPPED_BACKLOG
    values = pipe.metrics.as_dict()
    assert values["backup_dropped_by_component"] == {"backlog/mamba": PAGE_SIZE}
    assert values["backup_dropped_tokens"]["backlog"] == PAGE_SIZE
    assert pipe.decisions[-1][-2:] == ("dropped_backlog", "mamba")
    text = pipe.metrics.prometheus_text()
    assert 'hicache_pipeline_backup_dropped_component_tokens_total{gate="backlog",component="mamba"} 4' in text
    assert 'hicache_pipeline_component_backlog_units{component="mamba"} 4' in text
    pipe.check_invariants()
    pipe.tick()
    assert values["components"]["mamba"]["backlog_units"] == 4
    assert pipe.metrics.as_dict()["components"]["mamba"]["backlog_units"] == 0
    pipe.check_invariants()


def test_admission_is_all_components_or_none() -> None:
    pipe = make_hybrid(state_slots=2)
    hashes = chain(4)
    _store(pipe, [hashes])
    mamba = sidecar(pipe, "mamba")
    hog = mamba.device.alloc(2, owner="hog")  # no device state slot left
    assert hog is not None
    assert _staged(pipe, "r", hashes) == (4, 4)
    admission = pipe.admit("r", 0)
    assert admission.pages == 0 and admission.sidecars == {}
    assert pipe.device_pool.used_pages == 0
    mamba.device.free(hog)
    # KV short on the device: no trimming with sidecars (the state belongs to the full prefix).
    assert _staged(pipe, "r2", hashes) == (4, 4)
    hog_kv = pipe.device_pool.alloc(13 * PAGE_SIZE, owner="hog")
    assert hog_kv is not None
    assert pipe.admit("r2", 0).pages == 0 and mamba.device.free_pages == 2
    pipe.device_pool.free(hog_kv)
    # The device prefix grew: fewer KV pages, the same end state.
    assert _staged(pipe, "r3", hashes) == (4, 4)
    admission = pipe.admit("r3", 2 * PAGE_SIZE)
    assert admission.hashes == tuple(hashes[2:])
    assert_admitted(pipe, admission, hashes, 4)
    # The device prefix outgrew the staged prefix: nothing attaches.
    assert _staged(pipe, "r4", hashes) == (4, 4)
    assert pipe.admit("r4", 5 * PAGE_SIZE).sidecars == {}
    pipe.drain()
    pipe.check_invariants()


def test_abort_and_timeout_release_sidecar_units() -> None:
    pipe = make_hybrid(prefetch_timeout_ticks=2)
    hashes = chain(3)
    _store(pipe, [hashes])
    pipe.prefetch(PrefetchRequest("a", hashes))
    pipe.prefetch(PrefetchRequest("t", hashes))
    pipe.tick()
    used = {item.name: item.staging.used for item in pipe.sidecars.items}
    assert used == {"swa": 2 * WINDOW, "mamba": 2}
    assert pipe.abort("a")
    pipe.tick()
    pipe.tick()
    assert pipe.prefetch_status("t").state is PrefetchState.TIMED_OUT  # type: ignore[union-attr]
    assert all(item.staging.used == 0 for item in pipe.sidecars.items) and pipe.host_pool.used_pages == 0
    pipe.check_invariants()


def test_invariants_cover_every_pool() -> None:
    pipe = make_hybrid()
    hashes = chain(3)
    _store(pipe, [hashes])
    pipe.prefetch(PrefetchRequest("r", hashes))
    pipe.tick()
    pipe.check_invariants()
    staging = {item.name: item.staging for item in pipe.sidecars.items}
    stray = staging["mamba"].alloc(1, "stranger")
    assert stray is not None
    with pytest.raises(InvariantViolation, match="mamba host units leaked"):
        pipe.check_invariants()
    staging["mamba"].release(stray)
    held = next(iter(staging["swa"].owners))
    staging["swa"].release([held])
    with pytest.raises(InvariantViolation, match=r"swa host units .*freed while held"):
        pipe.check_invariants()
    with pytest.raises(HostPoolError):
        staging["swa"].release([held])
    staging["swa"].alloc(1, ("load", "someone-else"))
    with pytest.raises(InvariantViolation, match="wrong owner"):
        pipe.check_invariants()
    # The host pool itself is the pipeline's arena: slots handed out behind its back are reported.
    arena = pipe.host_pools["swa"]
    arena.free([0, 1, 2, 3])  # its page 0 goes back to the pool's own free list
    with pytest.raises(InvariantViolation, match="outside the pipeline's arena"):
        pipe.check_invariants()


def test_host_pool_given_with_slots_taken_is_refused() -> None:
    pools = hybrid_pools()
    host = pools.sidecars[1].make_host_pool(4)
    host.alloc(1)
    with pytest.raises(ConfigError, match="slots allocated already"):
        BufferOnlyPipeline(PipelineConfig(), pools, sim_backend(), host_pools={"mamba": host})


def test_kv_only_pipeline_keeps_its_v1_calls() -> None:
    storage, _backend = scripted()
    pipe = BufferOnlyPipeline(PipelineConfig(), make_device_pool(), storage)
    assert pipe.components[0].name == "kv" and len(pipe.components) == 1
    assert pipe.metrics.as_dict()["components"] == {}
    assert storage.registered_pools().keys() == {"kv"}


def test_sidecar_labels_are_distinct_from_kv() -> None:
    assert label("swa", "ab") != label("mamba", "ab")


def test_retained_kv_pages_still_need_their_sidecar_units() -> None:
    pipe = make_hybrid(retain_staged_pages=True)
    hashes = chain(4)
    _store(pipe, [hashes])
    assert len(pipe.buffer_cache or ()) == 4  # the written KV pages stay in host memory
    reads = pipe.metrics.as_dict()["components"]["mamba"]["units_read"]
    assert _staged(pipe, "r", hashes) == (4, 4)
    values = pipe.metrics.as_dict()
    assert values["retained_hit_pages"] == 4 and values["bytes_read"] == 0  # KV from retained pages
    assert values["components"]["mamba"]["units_read"] == reads + 1  # the state still comes from storage
    assert_admitted(pipe, pipe.admit("r", 0), hashes, 4)
    pipe.drain()
    pipe.check_invariants()


def test_admission_into_caller_pages_is_all_components_or_none() -> None:
    pipe = make_hybrid()
    hashes = chain(4)
    _store(pipe, [hashes])
    mamba = sidecar(pipe, "mamba")
    tokens = pipe.device_pool.alloc(4 * PAGE_SIZE, owner="engine")
    assert tokens is not None
    pages = (tokens[::PAGE_SIZE] // PAGE_SIZE).tolist()
    assert _staged(pipe, "short", hashes) == (4, 4)
    free_units = mamba.device.free_pages
    admission = pipe.admit("short", 0, pages[:3])  # the state belongs to the full prefix: nothing
    assert admission.pages == 0 and admission.sidecars == {} and mamba.device.free_pages == free_units
    assert _staged(pipe, "r", hashes) == (4, 4)
    admission = pipe.admit("r", 0, pages)
    assert (admission.device_indices[::PAGE_SIZE] // PAGE_SIZE).tolist() == pages
    assert_admitted(pipe, admission, hashes, 4)
    pipe.drain()
    pipe.check_invariants()
