"""One resilience policy for every backend: deadline, bounded retries, a circuit breaker per direction.

The policy wraps each primitive call a batch method makes. Faults (exceptions) become misses or
``False`` for the whole chunk; they never reach the caller. Retries apply only to idempotent
operations (``exists``, ``get``; ``set`` too, since a page key names fixed content).

The deadline is the time budget of one primitive call, retries included. While an attempt runs,
the call's absolute deadline is available to the backend on the calling thread
(:func:`current_deadline`, :func:`time_left`), so each client timeout is derived from what is left
of the budget rather than fixed: a call returns by its deadline whatever the server does. A call
already in progress is never abandoned where it could still write into host memory (a late
transfer into a reused slot would corrupt another page); the budget bounds it instead. A retry
starts only when, after its backoff, an attempt as long as the last one still fits in the budget.

Reads, writes and existence checks have a breaker each: faults of one direction (a read-only
disk refusing writes, say) never make the others fail fast.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from .errors import ConfigError
from .options import parse_options
from .stats import StorageStats

__all__ = [
    "DIRECTIONS",
    "CircuitBreaker",
    "CircuitOpen",
    "ResilienceOptions",
    "ResiliencePolicy",
    "current_deadline",
    "deadline_scope",
    "direction_of",
    "time_left",
]

T = TypeVar("T")

#: Operation → breaker direction. Deletes share the write breaker; any other operation its own.
_DIRECTION_OF = {"get": "read", "set": "write", "delete": "write", "exists": "exists"}
#: The directions that always have a breaker (others are created on first use).
DIRECTIONS = ("read", "write", "exists")

_local = threading.local()


def direction_of(op: str) -> str:
    """The breaker direction of an operation (``get`` → ``read``, ``set``/``delete`` → ``write``)."""
    return _DIRECTION_OF.get(op, op)


def current_deadline() -> float | None:
    """Absolute :func:`time.monotonic` deadline of the primitive call running on this thread, if any."""
    value = getattr(_local, "deadline", None)
    return value if isinstance(value, float) else None


def time_left(fallback: float) -> float:
    """Seconds left of the current call's budget, at most ``fallback`` (``fallback`` when no call runs
    under a deadline). May be zero or negative once the deadline has passed."""
    deadline = current_deadline()
    if deadline is None:
        return fallback
    return min(fallback, deadline - time.monotonic())


@contextlib.contextmanager
def deadline_scope(deadline: float | None) -> Iterator[None]:
    """Run the block with ``deadline`` (absolute, monotonic) as this thread's call deadline.

    For backends that hand a call's work to other threads: capture :func:`current_deadline` on the
    calling thread and enter its scope on the worker.
    """
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


@dataclass(frozen=True)
class ResilienceOptions:
    """Options of the policy (``extra_config["resilience"]``; ``False`` turns the policy off)."""

    deadline_s: float = 5.0
    """Time budget of one call including retries; client timeouts derive from it."""
    retries: int = 2
    """Extra attempts after a fault, for idempotent operations."""
    backoff_s: float = 0.01
    """First backoff; each retry doubles it, with full jitter."""
    backoff_max_s: float = 0.5
    """The backoff's cap."""
    breaker_threshold: int = 5
    """Consecutive faulted calls of one direction that open its breaker (0 = never)."""
    breaker_reset_s: float = 2.0
    """How long an open breaker fails calls fast before one half-open probe."""

    def __post_init__(self) -> None:
        prefix = "extra_config.resilience"
        if not 0 < self.deadline_s <= 3600:
            raise ConfigError(f"{prefix}.deadline_s", f"must be > 0 and <= 3600 seconds, got {self.deadline_s}")
        if not 0 <= self.retries <= 100:
            raise ConfigError(f"{prefix}.retries", f"must be in 0..100, got {self.retries}")
        for name in ("backoff_s", "backoff_max_s"):
            if not 0 <= getattr(self, name) <= 60:
                raise ConfigError(f"{prefix}.{name}", f"must be in [0, 60] seconds, got {getattr(self, name)}")
        if not 0 <= self.breaker_threshold <= 1_000_000:
            raise ConfigError(f"{prefix}.breaker_threshold", f"must be in 0..1000000, got {self.breaker_threshold}")
        if not 0 <= self.breaker_reset_s <= 3600:
            raise ConfigError(f"{prefix}.breaker_reset_s", f"must be in [0, 3600] seconds, got {self.breaker_reset_s}")

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
    """Runs primitive calls under the options; counts retries, short circuits and overruns in ``stats``.

    ``breakers`` holds one :class:`CircuitBreaker` per direction (:data:`DIRECTIONS`).
    """

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
        self._breakers_lock = threading.Lock()
        self.breakers: dict[str, CircuitBreaker] = {direction: self._new_breaker() for direction in DIRECTIONS}

    def _new_breaker(self) -> CircuitBreaker:
        return CircuitBreaker(self.options.breaker_threshold, self.options.breaker_reset_s, self._clock)

    def breaker(self, op: str) -> CircuitBreaker:
        """The breaker guarding ``op`` (its direction's)."""
        direction = direction_of(op)
        found = self.breakers.get(direction)
        if found is None:
            with self._breakers_lock:
                found = self.breakers.setdefault(direction, self._new_breaker())
        return found

    def call(self, op: str, attempt: Callable[[], T], *, idempotent: bool) -> T:
        """Run ``attempt`` with this thread's call deadline set; retry faults while idempotent and
        while another attempt fits in the budget.

        Raises the last fault (or :class:`CircuitOpen`) for the base class to turn into misses.
        """
        breaker = self.breaker(op)
        if not breaker.allow():
            self.stats.bump("short_circuited")
            self.stats.bump(f"short_circuited_{direction_of(op)}")
            raise CircuitOpen(
                f"{direction_of(op)} circuit breaker open after {breaker.consecutive_faults} consecutive faults"
            )
        budget = self.options.deadline_s
        start = self._clock()
        deadline = time.monotonic() + budget  # the budget on the real clock, for client timeouts
        tries = 1 + (self.options.retries if idempotent else 0)
        delay = self.options.backoff_s
        for number in range(tries):
            began = self._clock()
            try:
                with deadline_scope(deadline):
                    result = attempt()
            except Exception as error:
                self.stats.fault(op, error)
                now = self._clock()
                elapsed = now - start
                if elapsed > budget:
                    self.stats.bump("deadline_exceeded")
                pause = self._rng.uniform(0, min(delay, self.options.backoff_max_s))
                last_attempt = now - began
                if number == tries - 1 or not math.isfinite(elapsed) or elapsed + pause + last_attempt > budget:
                    breaker.failure()
                    raise
                self.stats.bump("retries")
                self._sleep(pause)
                delay *= 2
            else:
                if self._clock() - start > budget:
                    self.stats.bump("deadline_exceeded")
                breaker.success()
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    def snapshot(self) -> dict[str, Any]:
        """Options and the state of each direction's breaker, for ``get_stats()``."""
        with self._breakers_lock:
            breakers = dict(self.breakers)
        return {
            "options": asdict(self.options),
            "breakers": {direction: breaker.snapshot() for direction, breaker in sorted(breakers.items())},
        }
