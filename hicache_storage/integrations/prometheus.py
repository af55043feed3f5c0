"""The SDK's statistics where operators look: prometheus_client metrics, or a Prometheus textfile per rank.

Inside SGLang (``--enable-metrics``) every scheduler process records its metrics through
prometheus_client's multiprocess directory (``PROMETHEUS_MULTIPROC_DIR``) and SGLang's HTTP server
serves them all on ``/metrics``. :class:`PrometheusRecorder` mirrors a storage instance's
statistics into ``hicache_storage_*`` metrics of that same client, so they appear on the same page:
counters and histograms as they grow, breaker states as ``livemax`` gauges (a dead rank's value
leaves with it). :class:`TextfileWriter` writes the same statistics as a textfile instead
(``prometheus_text``), for node_exporter's textfile collector.

Every metric is labelled ``backend`` and ``tp_rank``; per-call metrics also ``pool`` and ``op``,
events ``event``, breaker gauges ``direction``. docs/operations.md lists them.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..contract import HiCacheStorage
from ..errors import ConfigError
from ..metrics import BREAKER_STATES, prometheus_text, write_textfile
from ..stats import StorageStats

__all__ = ["MULTIPROC_ENV", "PrometheusRecorder", "TextfileWriter", "exporters_for", "multiprocess_dir"]

#: The environment variable that puts prometheus_client in multiprocess mode (SGLang sets it with --enable-metrics).
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Seconds between two refreshes of the breaker gauges (they are read from the policy, not pushed).
GAUGE_REFRESH_S = 1.0

_EVENT_NAME = re.compile(r"[^a-zA-Z0-9_]")


def multiprocess_dir() -> str | None:
    """The multiprocess directory prometheus_client uses in this process, if any."""
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


@dataclass(frozen=True)
class _Families:
    """The ``hicache_storage_*`` metric families of this process (created once: the client registers them)."""

    calls: Any
    pages: Any
    pages_ok: Any
    pages_failed: Any
    bytes: Any
    seconds: Any
    faults: Any
    events: Any
    breaker_state: Any
    breaker_opened: Any


_families: _Families | None = None
_families_lock = threading.Lock()


def _create_families() -> _Families:
    from prometheus_client import Counter, Gauge, Histogram

    call = ["backend", "tp_rank", "pool", "op"]
    return _Families(
        calls=Counter("hicache_storage_calls", "Storage batch calls.", call),
        pages=Counter("hicache_storage_pages", "Pages asked for.", call),
        pages_ok=Counter("hicache_storage_pages_ok", "Pages stored (set), found (exists) or read (get).", call),
        pages_failed=Counter("hicache_storage_pages_failed", "Pages not stored, missing or not read.", call),
        bytes=Counter("hicache_storage_bytes", "Page bytes moved.", call),
        seconds=Histogram(
            "hicache_storage_call_seconds", "Latency of storage batch calls.", call, buckets=StorageStats.LATENCY_BOUNDS
        ),
        faults=Counter(
            "hicache_storage_faults", "Backend faults (exceptions), each turned into misses.", [*call[:2], "op"]
        ),
        events=Counter(
            "hicache_storage_events",
            "Named events: integrity failures, retries, short circuits, evictions, adapter errors, ...",
            ["backend", "tp_rank", "event"],
        ),
        breaker_state=Gauge(
            "hicache_storage_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            ["backend", "tp_rank", "direction"],
            multiprocess_mode="livemax",
        ),
        breaker_opened=Gauge(
            "hicache_storage_breaker_opened",
            "Times the circuit breaker of a direction opened in this process.",
            ["backend", "tp_rank", "direction"],
            multiprocess_mode="livesum",
        ),
    )


def _shared_families() -> _Families:
    global _families
    with _families_lock:
        if _families is None:
            _families = _create_families()
        return _families


class PrometheusRecorder:
    """Mirrors ``storage``'s statistics into prometheus_client metrics as they change (a :class:`StatsObserver`).

    ``tp_rank`` labels this instance's samples. Recording never raises into the storage call.
    """

    def __init__(self, storage: HiCacheStorage, tp_rank: int) -> None:
        self._families = _shared_families()
        self._storage = storage
        self._base = {"backend": type(storage.backend).__name__, "tp_rank": str(tp_rank)}
        self._gauges_at = 0.0
        storage.stats.observe(self)
        self.refresh_gauges()

    def on_call(self, op: str, pool: str, *, pages: int, ok: int, nbytes: int, seconds: float) -> None:
        labels = {**self._base, "pool": pool or "kv", "op": op}
        families = self._families
        families.calls.labels(**labels).inc()
        families.pages.labels(**labels).inc(pages)
        families.pages_ok.labels(**labels).inc(ok)
        families.pages_failed.labels(**labels).inc(pages - ok)
        families.bytes.labels(**labels).inc(nbytes)
        families.seconds.labels(**labels).observe(seconds)
        if time.monotonic() - self._gauges_at >= GAUGE_REFRESH_S:
            self.refresh_gauges()

    def on_fault(self, op: str) -> None:
        self._families.faults.labels(**self._base, op=op).inc()

    def on_event(self, name: str, amount: float) -> None:
        if amount > 0:
            self._families.events.labels(**self._base, event=_EVENT_NAME.sub("_", name)).inc(amount)

    def refresh_gauges(self) -> None:
        """Set the breaker gauges from the resilience policy's current state."""
        self._gauges_at = time.monotonic()
        policy = self._storage.resilience
        if policy is None:
            return
        for direction, breaker in policy.snapshot()["breakers"].items():
            labels = {**self._base, "direction": direction}
            self._families.breaker_state.labels(**labels).set(BREAKER_STATES.get(str(breaker["state"]), -1))
            self._families.breaker_opened.labels(**labels).set(breaker["times_opened"])


class TextfileWriter:
    """Writes ``storage``'s statistics to ``path`` (``{tp_rank}`` in it becomes the rank) at most every
    ``interval_s`` seconds, from the calls themselves, and once more on :meth:`flush`."""

    def __init__(self, storage: HiCacheStorage, path: str, tp_rank: int, interval_s: float = 15.0) -> None:
        if not isinstance(path, str) or not path:
            raise ConfigError("extra_config.metrics_textfile", f"expected a file path, got {path!r}")
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not 0 < interval_s <= 3600:
            raise ConfigError("extra_config.metrics_interval_s", f"must be in (0, 3600] seconds, got {interval_s!r}")
        self.path = path.replace("{tp_rank}", str(tp_rank))
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise ConfigError("extra_config.metrics_textfile", f"directory {directory!r} does not exist")
        self._storage = storage
        self._labels = {"tp_rank": str(tp_rank)}
        self._interval_s = float(interval_s)
        self._written_at = 0.0
        self._lock = threading.Lock()
        storage.stats.observe(self)

    def on_call(self, op: str, pool: str, *, pages: int, ok: int, nbytes: int, seconds: float) -> None:
        self._maybe_write()

    def on_fault(self, op: str) -> None:
        """Faults are in the next write."""

    def on_event(self, name: str, amount: float) -> None:
        """Events are in the next write."""

    def _maybe_write(self) -> None:
        now = time.monotonic()
        if now - self._written_at < self._interval_s or not self._lock.acquire(blocking=False):
            return
        try:
            self._written_at = now
            self.flush()
        finally:
            self._lock.release()

    def flush(self) -> None:
        """Write the statistics now (a write that fails is counted as ``metrics_textfile_failures``)."""
        try:
            write_textfile(self.path, prometheus_text(self._storage.get_stats(), self._labels))
        except OSError as error:
            self._storage.stats.note(f"metrics textfile {self.path}: {error}")
            self._storage.stats.bump("metrics_textfile_failures")


def exporters_for(storage: HiCacheStorage, extra: dict[str, Any], tp_rank: int) -> list[Callable[[], None]]:
    """The exporters ``extra_config`` asks for on ``storage`` (a textfile per rank with ``metrics_textfile``,
    else prometheus_client metrics when :data:`MULTIPROC_ENV` is set); returns what to call on close."""
    path = extra.get("metrics_textfile")
    if path is not None:
        writer = TextfileWriter(storage, path, tp_rank, extra.get("metrics_interval_s", 15.0))
        return [writer.flush]
    if multiprocess_dir() is not None:
        recorder = PrometheusRecorder(storage, tp_rank)
        return [recorder.refresh_gauges]
    return []
