import random

import pytest

from hicache_storage import ConfigError
from hicache_storage.resilience import CircuitBreaker, CircuitOpen, ResilienceOptions, ResiliencePolicy
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
    assert p.breaker.state == CircuitBreaker.OPEN
    with pytest.raises(CircuitOpen):
        p.call("get", lambda: [True], idempotent=True)
    assert stats.get("short_circuited") == 1
    clock.now += 10
    with pytest.raises(ConnectionError):  # half-open probe fails -> open again
        p.call("get", fail, idempotent=True)
    assert p.breaker.state == CircuitBreaker.OPEN
    clock.now += 10
    assert p.call("get", lambda: [True], idempotent=True) == [True]
    assert p.breaker.state == CircuitBreaker.CLOSED
    assert p.snapshot()["breaker"]["times_opened"] == 2


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
