"""faults: a backend fault never escapes a batch call: a miss or ``False``, counted, in bounded time.

Two halves. The suite injects faults into any SDK backend itself, through its primitives
(:mod:`~hicache_storage_conformance.faultkit`): a primitive that raises, hangs past the call's
deadline or answers garbage, and page buffers the backend cannot use, so a backend that swallows
its own errors and answers ``True`` is caught with no hook at all. With a fault hook
(``stop_server``/``start_server`` of the backend's conformance hooks) the real store goes away
and comes back too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, NoReturn

import pytest

from ..checks import Mismatch, check, check_equal, describe_page, short_key, summarize
from ..faultkit import FAULT_MODES, FAULT_RESILIENCE, fault_wrapper, poison_read, poison_write
from ..harness import Handle, Harness
from ..pages import host_indices, tensor_of, write_slot

#: Resilience settings of the server tests unless the configuration sets its own.
FAST_RESILIENCE = {"deadline_s": 2.0, "retries": 1, "backoff_s": 0.001, "backoff_max_s": 0.01, "breaker_reset_s": 0.05}
CALL_LIMIT_S = 10.0
RECOVERY_S = 10.0
PRIMITIVES = ("write_pages", "read_pages", "pages_exist")
#: Calls made under a hanging primitive: one per primitive, so the test stays short.
HANG_CALLS = ("batch_set_v1", "batch_get_v1", "batch_exists_each")

Call = tuple[str, Callable[[], Any], Any]


def _calls(handle: Handle, stored: str, fresh: str) -> list[Call]:
    """Every batch call on a stored and a fresh key, with what it must answer while the store fails."""
    backend, pool, harness = handle.backend, handle.pool, handle.harness
    write_slot(pool, 0, handle.content(fresh, 1))
    value = tensor_of(pool, handle.content(fresh, 1))
    calls: list[Call] = [
        ("batch_exists", lambda: backend.batch_exists([stored, fresh]), 0),
        ("exists", lambda: backend.exists(stored), False),
        ("batch_get", lambda: backend.batch_get([stored], [tensor_of(pool, bytes(handle.page_bytes))]), [None]),
        ("batch_set", lambda: backend.batch_set([fresh], [value]), False),
    ]
    if harness.target.has_v1:
        indices = host_indices(pool, [0, 1])
        calls += [
            ("batch_get_v1", lambda: backend.batch_get_v1([stored, fresh], indices), [False, False]),
            ("batch_set_v1", lambda: backend.batch_set_v1([fresh, stored], indices), [False, False]),
        ]
    if harness.sdk:
        calls.append(("batch_exists_each", lambda: backend.batch_exists_each([stored, fresh]), [False, False]))
    return calls


#: Per poisoned primitive: how page 1 is handed to it, the answer due, the rule, what a backend that
#: swallows the error does instead.
_POISONED = {
    "write_pages": (
        "a buffer that raises on use (its host memory unreadable)",
        "False unless the page is stored byte-exact (let the error propagate: the base class turns it into False "
        "and counts it)",
        "a write is acknowledged (True) only once a read of that key returns the whole page",
        "acknowledged a page it never stored",
    ),
    "read_pages": (
        "a read-only view of its slot (nothing can be read into it)",
        "a miss unless the slot holds the page (let the error propagate: the base class turns it into a miss)",
        "a read that fails is a miss, never a hit with bytes that are not the page",
        "reported a page it never read",
    ),
}


def _swallowed(path: str, primitive: str, keys: list[str], index: int, actual: str) -> NoReturn:
    """Raise the :class:`Mismatch` of a backend that swallowed the error of a poisoned ``primitive``."""
    handed, expected, rule, did = _POISONED[primitive]
    raise Mismatch(
        f"{path} of 3 pages, page 1 handed to {primitive} as {handed}: the answer for page {index} "
        f"(key {short_key(keys[index])})",
        expected,
        actual,
        rule=rule,
        hint=f"the backend swallowed an error and {did}",
    )


def _call(name: str, call: Callable[[], Any], expected: Any, limit: float, when: str) -> None:
    rule = "faults never escape a batch call: a miss or False, never an exception, never None, in bounded time"
    begin = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        raise Mismatch(f"{name} {when}", repr(expected), f"{type(exc).__name__}: {exc}", rule=rule) from exc
    took = time.monotonic() - begin
    check_equal(summarize(result), summarize(expected), f"{name} {when}", rule=rule)
    check(took <= limit, f"{name} {when}", f"an answer within {limit:.1f}s", f"an answer after {took:.1f}s", rule=rule)


def _fault_count(backend: Any) -> int:
    stats = backend.get_stats()
    counters = stats.get("counters", {})
    return int(stats.get("faults", 0)) + int(counters.get("short_circuited", 0))


def _recovers(handle: Handle, key: str, version: int, what: str) -> None:
    deadline = time.monotonic() + RECOVERY_S
    while True:
        if handle.put([key], versions=version) == [True] and handle.fetch([key]) == [handle.content(key, version)]:
            return
        check(time.monotonic() < deadline, what, f"writes and reads working again within {RECOVERY_S:.0f}s", "not")
        time.sleep(0.05)


class FaultTests:
    """Injected faults need only the SDK surface; the server tests need a fault hook."""

    category = "faults"

    def _faults_handle(self, harness: Harness, resilience: dict[str, float]) -> Handle:
        extra = None
        if harness.sdk and "resilience" not in harness.options:
            extra = {"resilience": resilience}
        return harness.open(config=harness.config(extra=extra))

    @pytest.mark.parametrize("mode", FAULT_MODES)
    def test_faults_injected(self, harness: Harness, mode: str) -> None:
        """A primitive that raises, hangs past the deadline or answers garbage turns into misses / False,
        counted in get_stats(): never an exception, never None, never garbage in the pool."""
        harness.require_sdk("fault injection into backend primitives")
        handle = self._faults_handle(harness, FAULT_RESILIENCE)
        backend = handle.backend
        stored, fresh = harness.keys(2)
        handle.store([stored], 1, "writing a page before the fault")
        calls = _calls(handle, stored, fresh)
        if mode == "hangs":
            calls = [call for call in calls if call[0] in HANG_CALLS]
        policy = getattr(backend, "resilience", None)
        deadline = policy.options.deadline_s if policy is not None else 2.0
        limit = 2 * deadline + 1.0
        when = f"while every primitive {mode.replace('_', ' ')}"
        with ExitStack() as stack:
            for primitive in PRIMITIVES:
                stack.enter_context(handle.interpose(primitive, fault_wrapper(mode, primitive)))
            for name, call, expected in calls:
                before = _fault_count(backend)
                _call(name, call, expected, limit, when)
                after = _fault_count(backend)
                check(
                    after > before,
                    f"get_stats() after {name} {when}",
                    "the fault counted (faults, or short_circuited once the breaker opened)",
                    f"no counter moved (faults + short_circuited stayed {before})",
                    rule="a backend fault is counted in get_stats()",
                )
        _recovers(handle, fresh, 2, f"the backend after the injected fault ({mode})")
        handle.expect([stored], 1, "reading, after the fault, the page written before it")

    def test_faults_write_error_is_not_acknowledged(self, harness: Harness) -> None:
        """A write that fails inside the backend answers False: True only for a page stored byte-exact
        (a backend that swallows its errors acknowledges pages it never stored)."""
        harness.require_sdk("fault injection into backend primitives")
        handle = self._faults_handle(harness, FAULT_RESILIENCE)
        paths = ["batch_set_v1", "batch_set"] if harness.target.has_v1 else ["batch_set"]
        for path in paths:
            keys = harness.keys(3)
            doomed = {handle.storage_key(keys[1])}
            with handle.interpose("write_pages", poison_write(doomed)):
                done = handle.set_v1(keys, versions=1) if path == "batch_set_v1" else [handle.set_v0(keys, 1)] * 3
            got = handle.fetch(keys)
            seen = handle.exists_each(keys)
            for index, (ok, data, there) in enumerate(zip(done, got, seen)):
                if (ok or there) and data != handle.content(keys[index], 1):
                    answer = "True" if ok else "False, yet exists() says the page is there"
                    actual = f"{answer}, and a read returns {describe_page(data, keys[index], 1, others=keys)}"
                    _swallowed(path, "write_pages", keys, index, actual)

    def test_faults_read_error_is_a_miss(self, harness: Harness) -> None:
        """A read that fails inside the backend is a miss: never a hit whose host slot does not hold the page."""
        harness.require_sdk("fault injection into backend primitives")
        handle = self._faults_handle(harness, FAULT_RESILIENCE)
        keys = handle.store_fresh(3, 2, "writing 3 pages")
        doomed = {handle.storage_key(keys[1])}
        reads: list[tuple[str, Callable[[], list[bytes | None]]]] = [("batch_get", lambda: handle.get_v0(keys))]
        if harness.target.has_v1:
            reads.insert(0, ("batch_get_v1", lambda: handle.get_v1(keys)))
        for path, read in reads:
            with handle.interpose("read_pages", poison_read(doomed)):
                got = read()
            for index, data in enumerate(got):
                if data is not None and data != handle.content(keys[index], 2):
                    actual = f"a hit, and the slot holds {describe_page(data, keys[index], 2, others=keys)}"
                    _swallowed(path, "read_pages", keys, index, actual)

    def test_faults_server_stopped_then_restarted(self, harness: Harness) -> None:
        """With the store gone every batch call answers misses / False within 10 s and never raises;
        after the restart the backend works again and nothing written meanwhile reads as data."""
        handle = self._faults_handle(harness, FAST_RESILIENCE)
        stored, fresh = harness.keys(2)
        handle.store([stored], 1, "writing a page before the outage")
        harness.stop_server_or_skip(handle)
        for name, call, expected in _calls(handle, stored, fresh):
            _call(name, call, expected, CALL_LIMIT_S, "with the server stopped")
        harness.start_server(handle)
        got = handle.fetch([fresh])[0]
        check(
            got is None or got == handle.content(fresh, 1),
            "reading, after the restart, a page whose writes failed during the outage",
            "a miss (or the page byte-exact)",
            describe_page(got, fresh, 1),
        )
        _recovers(handle, fresh, 2, "the backend after the restart")
