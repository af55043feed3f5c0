"""One resilience policy for every backend: deadline, bounded retries, circuit breaker.

The policy wraps each primitive call a batch method makes. Faults (exceptions) become misses or
``False`` for the whole chunk; they never reach the caller. Retries apply only to idempotent
operations (``exists``, ``get``; ``set`` too, since a page key names fixed content). The deadline
bounds the time spent retrying a call; backends also hand it to their client as the I/O timeout,
since a call already in progress is never abandoned (a late transfer into host memory that has been
reused could corrupt another page).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from .errors import ConfigError
from .options import parse_options
from .stats import StorageStats

__all__ = ["CircuitBreaker", "ResilienceOptions", "ResiliencePolicy", "CircuitOpen"]

T = TypeVar("T")


@dataclass(frozen=True)
class ResilienceOptions:
    """Options of the policy (``extra_config["resilience"]``; ``False`` turns the policy off).

    - ``deadline_s``: time budget of one call including retries; also the client I/O timeout.
    - ``retries``: extra attempts after a fault, for idempotent operations.
    - ``backoff_s`` / ``backoff_max_s``: first backoff and cap; each retry doubles, full jitter.
    - ``breaker_threshold``: consecutive faulted calls that open the breaker (0 = never).
    - ``breaker_reset_s``: how long an open breaker fails calls fast before one half-open probe.
    """

    deadline_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.01
    backoff_max_s: float = 0.5
    breaker_threshold: int = 5
    breaker_reset_s: float = 2.0

    def __post_init__(self) -> None:
        if self.deadline_s <= 0:
            raise ConfigError("extra_config.resilience.deadline_s", f"must be > 0, got {self.deadline_s}")
        if self.retries < 0:
            raise ConfigError("extra_config.resilience.retries", f"must be >= 0, got {self.retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError("extra_config.resilience.backoff_s", "backoffs must be >= 0")
        if self.breaker_threshold < 0:
            raise ConfigError("extra_config.resilience.breaker_threshold", "must be >= 0")
        if self.breaker_reset_s < 0:
            raise ConfigError("extra_config.resilience.breaker_reset_s", "must be >= 0")

    @classmethod
    def from_config(cls, value: Any) -> ResilienceOptions | None:
        """Parse ``extra_config["resilience"]``: ``None``/``True`` = defaults, ``False`` = off, dict = options."""
        if value is None or value is True:
            return cls()
        if value is False:
            return None
        if not isinstance(value, Mapping):
            raise ConfigError("extra_config.resilience", f"expected a dict, true or false, got {value!r}")
        return parse_options(cls, value, prefix="extra_config.resilience")


class CircuitOpen(Exception):
    """Raised inside the policy when the breaker rejects a call (never escapes a batch call)."""


class CircuitBreaker:
    """Closed → (threshold consecutive faults) → open → (reset_s) → half-open → one probe."""

    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(self, threshold: int, reset_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.reset_s = reset_s
        self._clock = clock
        self._lock = threading.Lock()
        self.state = self.CLOSED
        self.consecutive_faults = 0
        self.opened_at = 0.0
        self.times_opened = 0
        self._probe_in_flight = False

    def allow(self) -> bool:
        """Whether a call may go to the backend now (claims the probe when half-open)."""
        with self._lock:
            if self.state == self.CLOSED:
                return True
            if self.state == self.OPEN and self._clock() - self.opened_at >= self.reset_s:
                self.state = self.HALF_OPEN
            if self.state == self.HALF_OPEN and not self._probe_in_flight:
                self._probe_in_flight = True
                return True
            return False

    def success(self) -> None:
        """Record a call that reached the backend without a fault."""
        with self._lock:
            self.consecutive_faults = 0
            self._probe_in_flight = False
            self.state = self.CLOSED

    def failure(self) -> None:
        """Record a faulted call; opens the breaker at the threshold or on a failed probe."""
        with self._lock:
            self.consecutive_faults += 1
            probe = self._probe_in_flight
            self._probe_in_flight = False
            if probe or (self.threshold and self.consecutive_faults >= self.threshold):
                if self.state != self.OPEN:
                    self.times_opened += 1
                self.state = self.OPEN
                self.opened_at = self._clock()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "state": self.state,
                "consecutive_faults": self.consecutive_faults,
                "times_opened": self.times_opened,
            }


class ResiliencePolicy:
    """Runs primitive calls under the options; counts retries, short circuits and overruns in ``stats``."""

    def __init__(
        self,
        options: ResilienceOptions,
        stats: StorageStats,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.options = options
        self.stats = stats
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.breaker = CircuitBreaker(options.breaker_threshold, options.breaker_reset_s, clock)

    def call(self, op: str, attempt: Callable[[], T], *, idempotent: bool) -> T:
        """Run ``attempt``; retry faults while idempotent and inside the deadline.

        Raises the last fault (or :class:`CircuitOpen`) for the base class to turn into misses.
        """
        if not self.breaker.allow():
            self.stats.bump("short_circuited")
            raise CircuitOpen(f"circuit breaker open after {self.breaker.consecutive_faults} consecutive faults")
        start = self._clock()
        tries = 1 + (self.options.retries if idempotent else 0)
        delay = self.options.backoff_s
        for number in range(tries):
            try:
                result = attempt()
            except Exception as error:
                self.stats.fault(op, error)
                elapsed = self._clock() - start
                if elapsed > self.options.deadline_s:
                    self.stats.bump("deadline_exceeded")
                pause = self._rng.uniform(0, min(delay, self.options.backoff_max_s))
                last = number == tries - 1
                if last or elapsed + pause > self.options.deadline_s:
                    self.breaker.failure()
                    raise
                self.stats.bump("retries")
                self._sleep(pause)
                delay *= 2
            else:
                if self._clock() - start > self.options.deadline_s:
                    self.stats.bump("deadline_exceeded")
                self.breaker.success()
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def snapshot(self) -> dict[str, Any]:
        """Options and breaker state, for ``get_stats()``."""
        return {"options": asdict(self.options), "breaker": self.breaker.snapshot()}
