import random
import time

import pytest

from hicache_storage import ConfigError
from hicache_storage.resilience import (
    CircuitBreaker,
    CircuitOpen,
    ResilienceOptions,
    ResiliencePolicy,
    current_deadline,
    deadline_scope,
    time_left,
)
from hicache_storage.stats import StorageStats


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def policy(**kw):
    clock = Clock()
    stats = StorageStats()
    p = ResiliencePolicy(ResilienceOptions(**kw), stats, clock=clock, sleep=clock.sleep, rng=random.Random(0))
    return p, stats, clock


def test_retries_idempotent_faults_then_succeeds():
    p, stats, _ = policy(retries=2)
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("down")
        return [True]

    assert p.call("get", flaky, idempotent=True) == [True]
    assert stats.get("retries") == 2
    assert stats.op("get")["faults"] == 2


def test_no_retry_for_non_idempotent():
    p, _, _ = policy(retries=5)
    calls = []

    def fail():
        calls.append(1)
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        p.call("set", fail, idempotent=False)
    assert len(calls) == 1


def test_deadline_bounds_retries():
    p, stats, clock = policy(retries=100, deadline_s=1.0, backoff_s=0.4, backoff_max_s=0.4)

    def slow_fail():
        clock.now += 0.3
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        p.call("get", slow_fail, idempotent=True)
    assert clock.now <= 1.0 + 0.3 + 0.4
    assert stats.get("retries") < 5


def test_breaker_opens_fails_fast_then_probes():
    p, stats, clock = policy(retries=0, breaker_threshold=3, breaker_reset_s=10)

    def fail():
        raise ConnectionError("down")

    for _ in range(3):
        with pytest.raises(ConnectionError):
            p.call("get", fail, idempotent=True)
    assert p.breaker("get").state == CircuitBreaker.OPEN
    with pytest.raises(CircuitOpen):
        p.call("get", lambda: [True], idempotent=True)
    assert stats.get("short_circuited") == 1
    clock.now += 10
    with pytest.raises(ConnectionError):  # half-open probe fails -> open again
        p.call("get", fail, idempotent=True)
    assert p.breaker("get").state == CircuitBreaker.OPEN
    clock.now += 10
    assert p.call("get", lambda: [True], idempotent=True) == [True]
    assert p.breaker("get").state == CircuitBreaker.CLOSED
    assert p.snapshot()["breakers"]["read"]["times_opened"] == 2


def test_options_parsing():
    assert ResilienceOptions.from_config(False) is None
    assert ResilienceOptions.from_config(None) == ResilienceOptions()
    assert ResilienceOptions.from_config({"retries": 0}).retries == 0
    with pytest.raises(ConfigError, match=r"resilience\.retry: unknown option"):
        ResilienceOptions.from_config({"retry": 1})
    with pytest.raises(ConfigError, match="deadline_s"):
        ResilienceOptions.from_config({"deadline_s": 0})
    with pytest.raises(ConfigError, match="expected a dict"):
        ResilienceOptions.from_config("fast")


def test_breakers_are_per_direction():
    p, stats, _ = policy(retries=0, breaker_threshold=3, breaker_reset_s=10)

    def fail():
        raise OSError("read-only file system")

    for _ in range(5):
        with pytest.raises((OSError, CircuitOpen)):
            p.call("set", fail, idempotent=True)
    assert p.breaker("set").state == CircuitBreaker.OPEN
    assert p.breaker("delete") is p.breaker("set")  # deletes are writes
    # reads and existence checks are not affected by faulted writes
    assert p.breaker("get").state == CircuitBreaker.CLOSED
    assert p.call("get", lambda: [True], idempotent=True) == [True]
    assert p.call("exists", lambda: [True], idempotent=True) == [True]
    snapshot = p.snapshot()["breakers"]
    assert snapshot["write"]["state"] == "open" and snapshot["write"]["times_opened"] == 1
    assert snapshot["read"]["state"] == "closed" and snapshot["exists"]["state"] == "closed"
    assert stats.get("short_circuited_write") == 2 and stats.get("short_circuited_read") == 0


def test_the_call_deadline_is_visible_to_the_attempt():
    p, _, _ = policy(deadline_s=2.0)
    assert current_deadline() is None
    assert time_left(7.0) == 7.0
    seen = []

    def attempt():
        seen.append((current_deadline(), time_left(5.0), time_left(0.5)))
        return [True]

    before = time.monotonic()
    p.call("get", attempt, idempotent=True)
    deadline, left, capped = seen[0]
    assert deadline is not None and before + 2.0 <= deadline <= time.monotonic() + 2.0
    assert 1.5 < left <= 2.0 and capped == 0.5
    assert current_deadline() is None  # cleared after the call


def test_deadline_scope_nests_and_restores():
    with deadline_scope(123.0):
        assert current_deadline() == 123.0
        with deadline_scope(None):
            assert current_deadline() is None
        assert current_deadline() == 123.0
    assert current_deadline() is None


def test_no_retry_unless_an_attempt_fits_in_what_is_left():
    p, stats, clock = policy(retries=5, deadline_s=1.0, backoff_s=0.0)
    calls = []

    def slow_fail():
        calls.append(clock.now)
        clock.now += 0.6  # one attempt takes 0.6 s: a second one would end at 1.2 s
        raise TimeoutError("slow")

    with pytest.raises(TimeoutError):
        p.call("get", slow_fail, idempotent=True)
    assert len(calls) == 1 and stats.get("retries") == 0

    fast = []

    def fast_fail():
        fast.append(1)
        clock.now += 0.1
        raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        p.call("get", fast_fail, idempotent=True)
    assert len(fast) == 6  # quick faults: every retry fits
