"""concurrency: threads writing and reading overlapping keys never observe a partial or mixed page."""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..checks import Mismatch, check, describe_page
from ..harness import Handle, Harness, expect_bools
from ..pages import PoolSpec, host_indices, page_content, read_slot, tensor_bytes, tensor_of, verify_page, write_slot

RUN_SECONDS = 0.6
JOIN_SECONDS = 30.0
SLOTS_PER_THREAD = 8
#: visible_only_when_complete: keys written one by one while readers poll the key being written.
VISIBLE_KEYS = 2000
VISIBLE_MIN_KEYS = 8
VISIBLE_SECONDS = 0.5
SWITCH_INTERVAL_S = 0.0001


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
    check(
        not stuck,
        "joining the test's threads",
        f"all done within {JOIN_SECONDS:.0f}s",
        f"{stuck} still running (a deadlock or hang)",
    )


class ConcurrencyTests:
    """Pages are stamped with (key, version); any mix of two writes is detected."""

    category = "concurrency"

    def test_concurrency_overlapping_reads_and_writes(self, harness: Harness) -> None:
        """Threads writing and reading overlapping keys (v1 and v0 mixed) never observe a partial or mixed page."""
        handle = harness.open(PoolSpec(num_pages=6 * SLOTS_PER_THREAD))
        keys = handle.store_fresh(6, 0, "writing 6 pages before the threads start")
        versions = itertools.count(1)
        lock = threading.Lock()
        errors: list[str] = []
        stop_at = time.monotonic() + RUN_SECONDS
        reads = [0]
        missing = [0]

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
                                with lock:
                                    missing[0] += 1
                            continue
                        problem = verify_page(key, data)
                        if problem:
                            errors.append(f"concurrent read saw a partial or mixed page: {problem}")
                    reads[0] += 1

            return work

        faults_before = _faults_counted(handle.backend)
        _run_threads([writer(0), writer(1), writer(2), reader(3), reader(4), reader(5)], errors)
        if missing[0] and (faults_before is None or _faults_counted(handle.backend) == faults_before):
            # A miss is allowed where the backend counted a fault (a fault degrades to a miss); else a
            # page written before the run went missing while it was being overwritten.
            errors.append("a page written before the run was reported missing during concurrent writes")
        check(
            not errors,
            "3 writer and 3 reader threads on 6 keys for 0.6 s",
            "every page read complete and of one write",
            errors[0] if errors else "",
            rule="a page is visible only once fully stored; concurrent writes never mix",
        )
        check(reads[0] > 0, "the reader threads", "at least one read completed during the run", "none")

    def test_concurrency_visible_only_when_complete(self, harness: Harness) -> None:
        """A key is visible (exists) only once its whole page is stored: a reader that sees it while its
        write is still running must read the complete page."""
        handle = harness.open(PoolSpec(num_pages=16))
        keys = harness.keys(VISIBLE_KEYS)
        current: list[str | None] = [None]
        in_flight = threading.Event()
        finished = threading.Event()
        errors: list[str] = []
        stop_at = time.monotonic() + VISIBLE_SECONDS

        done: list[str] = []

        def writer() -> None:
            try:
                for index, key in enumerate(keys):
                    if errors or (index >= VISIBLE_MIN_KEYS and time.monotonic() > stop_at):
                        return
                    current[0] = key
                    in_flight.set()
                    _write_one(handle, key, slot=0)
                    in_flight.clear()
                    done.append(key)
            finally:
                finished.set()

        def reader(slot: int) -> Callable[[], None]:
            def work() -> None:
                while not finished.is_set() and not errors:
                    key, during = current[0], in_flight.is_set()
                    if key is None or not handle.exists_each([key])[0]:
                        continue
                    data = _read_one(handle, key, [slot])
                    when = "while its write was still running" if during else "just after its write"
                    if data is None:
                        if not harness.caps.may_evict:
                            errors.append(f"exists() said True {when}, but a read right after was a miss")
                    elif data != handle.content(key, 11):
                        errors.append(
                            f"exists() said True {when}, but a read right after returned {describe_page(data, key, 11)}"
                        )

            return work

        previous = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)  # interleave the threads finely: short windows show
        try:
            _run_threads([writer, reader(8), reader(9)], errors)
        finally:
            sys.setswitchinterval(previous)
        if errors:
            raise Mismatch(
                "a reader polling exists() on the key being written (then reading it)",
                "a complete page whenever exists() is True",
                errors[0],
                rule="exists means readable: a page is visible only once it is fully stored",
                hint="write to a temporary name or row and publish it in one step (rename, commit, SET)",
            )
        for begin in range(0, len(done), 8):
            chunk = done[begin : begin + 8]
            handle.expect(chunk, 11, "reading the pages after the writes")


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


def _faults_counted(backend: Any) -> int | None:
    """Faults counted so far (``None`` where the caller API keeps no statistics): whole calls (``faults``,
    ``short_circuited``) and single keys of a call (the backend's ``key_faults``)."""
    get_stats = getattr(backend, "get_stats", None)
    if get_stats is None:
        return None
    stats = get_stats()
    if not isinstance(stats, dict):
        return None
    counters = stats.get("counters", {})
    return int(stats.get("faults", 0)) + int(counters.get("short_circuited", 0)) + int(counters.get("key_faults", 0))
