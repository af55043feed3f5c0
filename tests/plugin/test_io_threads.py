"""Tests of ``IoThreads``: order, every run finished before an error is raised, threads stopped on close."""

from __future__ import annotations

import threading
import time

import pytest

from hicache_storage.plugin.io_threads import IoThreads


@pytest.mark.parametrize("threads", [1, 2, 4, 64])
def test_results_keep_input_order(threads: int) -> None:
    keys = list(range(50))
    pool = IoThreads(threads)
    assert pool.map(lambda key, page: key % 3 == page, keys, [k % 3 for k in keys]) == [True] * 50
    assert pool.map(lambda key, page: key % 2 == 0, keys, keys) == [k % 2 == 0 for k in keys]
    assert pool.map(lambda key, page: True, [], []) == []
    pool.close()
    pool.close()  # idempotent
    assert pool.map(lambda key, page: key == page, keys, keys) == [True] * 50  # new threads after a close
    pool.close()


def test_error_is_raised_only_after_every_run_finished() -> None:
    finished: list[int] = []
    lock = threading.Lock()

    def work(key: int, _page: None) -> bool:
        if key == 0:
            raise OSError("disk gone")
        time.sleep(0.01)
        with lock:
            finished.append(key)
        return True

    with pytest.raises(OSError, match="disk gone"):
        IoThreads(4).map(work, list(range(8)), [None] * 8)
    # The caller's run stops at its first page; the three other runs (pages 2..7) all completed.
    assert sorted(finished) == [2, 3, 4, 5, 6, 7]
