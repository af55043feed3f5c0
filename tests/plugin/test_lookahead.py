"""Lookahead: in-order values, each computed once, never waiting on a helper that has not started."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from hicache_storage.plugin.lookahead import Lookahead


def test_values_in_order_without_executor() -> None:
    ahead = Lookahead(lambda n: n * n, list(range(5)), None)
    assert [ahead.get(i) for i in range(5)] == [0, 1, 4, 9, 16]
    ahead.close()


def _counted_square() -> tuple[Callable[[int], int], Counter[int]]:
    """``n * n``, and a counter of how often each ``n`` was computed (thread-safe)."""
    calls: Counter[int] = Counter()
    lock = threading.Lock()

    def square(n: int) -> int:
        with lock:
            calls[n] += 1
        return n * n

    return square, calls


def test_each_value_computed_once_with_a_helper() -> None:
    square, calls = _counted_square()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(50):
            calls.clear()
            ahead = Lookahead(square, list(range(64)), pool)
            assert [ahead.get(i) for i in range(64)] == [n * n for n in range(64)]
            ahead.close()
            assert set(calls.values()) == {1} and len(calls) == 64


def test_caller_computes_what_a_busy_helper_has_not_started() -> None:
    release = threading.Event()
    computed_by: dict[int, str] = {}

    def record(n: int) -> int:
        computed_by[n] = threading.current_thread().name
        return n

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="helper") as pool:
        pool.submit(release.wait)  # the only worker is busy: the helper's job cannot start
        ahead = Lookahead(record, list(range(8)), pool)
        assert [ahead.get(i) for i in range(8)] == list(range(8))  # would hang if get() waited on it
        release.set()
        ahead.close()
    assert set(computed_by.values()) == {threading.current_thread().name}


def test_close_waits_for_the_item_in_progress() -> None:
    started = threading.Event()
    finish = threading.Event()
    finished: list[int] = []

    def slow(n: int) -> int:
        if n == 1:
            started.set()
            finish.wait(5)
            finished.append(n)
        return n

    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = Lookahead(slow, [0, 1, 2, 3], pool)
        assert started.wait(5)
        threading.Timer(0.05, finish.set).start()
        ahead.close()  # returns only once item 1 is done, and claims nothing more
        assert finished == [1]


def test_an_error_is_raised_by_the_get_of_its_item() -> None:
    def fail_on_two(n: int) -> int:
        if n == 2:
            raise ValueError("bad item 2")
        return n

    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = Lookahead(fail_on_two, list(range(5)), pool)
        assert ahead.get(0) == 0 and ahead.get(1) == 1
        with pytest.raises(ValueError, match="bad item 2"):
            ahead.get(2)
        assert ahead.get(3) == 3 and ahead.get(4) == 4
        ahead.close()


def test_advance_computes_the_next_unclaimed_value_once() -> None:
    square, calls = _counted_square()
    ahead = Lookahead(square, list(range(4)), None)
    assert ahead.get(0) == 0
    assert ahead.advance() and ahead.advance()  # items 1 and 2, ahead of their get()
    assert calls == Counter({0: 1, 1: 1, 2: 1})
    assert [ahead.get(i) for i in range(1, 4)] == [1, 4, 9]
    assert not ahead.advance()  # every item claimed
    ahead.close()
    assert set(calls.values()) == {1} and len(calls) == 4


def test_advance_and_a_helper_share_the_work() -> None:
    square, calls = _counted_square()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(20):
            calls.clear()
            ahead = Lookahead(square, list(range(64)), pool)
            values = []
            for i in range(64):
                values.append(ahead.get(i))
                ahead.advance()
            ahead.close()
            assert values == [n * n for n in range(64)]
            assert set(calls.values()) == {1} and len(calls) == 64
