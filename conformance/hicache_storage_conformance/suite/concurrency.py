"""concurrency: threads writing and reading overlapping keys never observe a partial or mixed page."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable

from ..harness import Handle, Harness, expect_bools
from ..pages import PoolSpec, host_indices, page_content, read_slot, tensor_bytes, tensor_of, verify_page, write_slot

RUN_SECONDS = 0.6
JOIN_SECONDS = 30.0
SLOTS_PER_THREAD = 8


def _run_threads(workers: list[Callable[[], None]], errors: list[str]) -> None:
    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # report, never lose, a thread's failure
                errors.append(f"{type(exc).__name__}: {exc}")

        return run

    threads = [threading.Thread(target=guarded(w), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN_SECONDS
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = sum(thread.is_alive() for thread in threads)
    assert not stuck, f"{stuck} threads still running after {JOIN_SECONDS}s (deadlock or hang)"


class ConcurrencyTests:
    """Pages are stamped with (key, version); any mix of two writes is detected."""

    category = "concurrency"

    def test_concurrency_overlapping_reads_and_writes(self, harness: Harness) -> None:
        handle = harness.open(PoolSpec(num_pages=6 * SLOTS_PER_THREAD))
        keys = harness.keys(6)
        assert handle.put(keys, versions=0) == [True] * len(keys)
        versions = itertools.count(1)
        lock = threading.Lock()
        errors: list[str] = []
        stop_at = time.monotonic() + RUN_SECONDS
        reads = [0]

        def writer(thread: int) -> Callable[[], None]:
            def work() -> None:
                rng = random.Random(thread)
                slots = [thread * SLOTS_PER_THREAD + i for i in range(3)]
                while time.monotonic() < stop_at and not errors:
                    batch = rng.sample(keys, 3)
                    with lock:
                        vers = [next(versions) for _ in batch]
                    if harness.target.has_v1 and rng.random() < 0.7:
                        for key, version, slot in zip(batch, vers, slots):
                            write_slot(handle.pool, slot, page_content(key, version, handle.page_bytes))
                        expect_bools(
                            handle.backend.batch_set_v1(batch, host_indices(handle.pool, slots)), 3, "batch_set_v1"
                        )
                    else:
                        values = [
                            tensor_of(handle.pool, page_content(k, v, handle.page_bytes)) for k, v in zip(batch, vers)
                        ]
                        handle.backend.batch_set(batch, values)

            return work

        def reader(thread: int) -> Callable[[], None]:
            def work() -> None:
                rng = random.Random(100 + thread)
                slots = [thread * SLOTS_PER_THREAD + i for i in range(4)]
                while time.monotonic() < stop_at and not errors:
                    batch = rng.sample(keys, 4)
                    if harness.target.has_v1 and rng.random() < 0.7:
                        hits = expect_bools(
                            handle.backend.batch_get_v1(batch, host_indices(handle.pool, slots)), 4, "batch_get_v1"
                        )
                        pages = [read_slot(handle.pool, s) if hit else None for hit, s in zip(hits, slots)]
                    else:
                        targets = [tensor_of(handle.pool, bytes(handle.page_bytes)) for _ in batch]
                        pages = [
                            None if t is None else tensor_bytes(t) for t in handle.backend.batch_get(batch, targets)
                        ]
                    for key, data in zip(batch, pages):
                        if data is None:
                            if not harness.caps.may_evict:
                                errors.append(
                                    "a page written before the run was reported missing during concurrent writes"
                                )
                            continue
                        problem = verify_page(key, data)
                        if problem:
                            errors.append(f"concurrent read saw a partial or mixed page: {problem}")
                    reads[0] += 1

            return work

        _run_threads([writer(0), writer(1), writer(2), reader(3), reader(4), reader(5)], errors)
        assert not errors, errors[0]
        assert reads[0] > 0, "no read completed during the run"

    def test_concurrency_visible_only_when_complete(self, harness: Harness) -> None:
        handle = harness.open(PoolSpec(num_pages=16))
        keys = harness.keys(24)
        done = threading.Event()
        errors: list[str] = []
        checked = [0]

        def writer() -> None:
            try:
                for key in keys:
                    if errors:
                        return
                    _write_one(handle, key, slot=0)
            finally:
                done.set()

        def reader() -> None:
            slots = [8]
            while not errors:
                finished = done.is_set()
                for key in keys:
                    if not handle.exists_each([key])[0]:
                        continue
                    data = _read_one(handle, key, slots)
                    checked[0] += 1
                    if data is None:
                        if not harness.caps.may_evict:
                            errors.append("a key reported as existing could not be read (exists must mean readable)")
                        continue
                    if data != handle.content(key, 11):
                        errors.append("a key became visible before its page was fully written (read partial bytes)")
                if finished:
                    return

        _run_threads([writer, reader], errors)
        assert not errors, errors[0]
        assert checked[0] >= len(keys), "the reader checked fewer pages than were written"


def _write_one(handle: Handle, key: str, slot: int) -> None:
    if handle.harness.target.has_v1:
        write_slot(handle.pool, slot, handle.content(key, 11))
        expect_bools(handle.backend.batch_set_v1([key], host_indices(handle.pool, [slot])), 1, "batch_set_v1")
    else:
        handle.backend.batch_set([key], [tensor_of(handle.pool, handle.content(key, 11))])


def _read_one(handle: Handle, key: str, slots: list[int]) -> bytes | None:
    if handle.harness.target.has_v1:
        hit = expect_bools(handle.backend.batch_get_v1([key], host_indices(handle.pool, slots)), 1, "batch_get_v1")[0]
        return read_slot(handle.pool, slots[0]) if hit else None
    target = handle.backend.batch_get([key], [tensor_of(handle.pool, bytes(handle.page_bytes))])[0]
    return None if target is None else tensor_bytes(target)
