"""faults: with the server stopped every batch call answers misses/False in bounded time, never raises."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ..harness import Handle, Harness
from ..pages import host_indices, tensor_of, write_slot
from ..side_channel import SideChannelUnavailable

#: Resilience settings used for this category unless the configuration sets its own.
FAST_RESILIENCE = {"deadline_s": 2.0, "retries": 1, "backoff_s": 0.001, "backoff_max_s": 0.01, "breaker_reset_s": 0.05}
CALL_LIMIT_S = 10.0
RECOVERY_S = 10.0


def _call(name: str, call: Callable[[], Any], expected: Any, timings: dict[str, float]) -> None:
    begin = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        pytest.fail(f"{name} raised {type(exc).__name__} ({exc}) with the server stopped; it must return {expected!r}")
    timings[name] = time.monotonic() - begin
    assert result is not None, f"{name} returned None with the server stopped; expected {expected!r}"
    assert result == expected, f"{name} returned {result!r} with the server stopped; expected {expected!r}"
    assert timings[name] <= CALL_LIMIT_S, (
        f"{name} took {timings[name]:.1f}s with the server stopped (limit {CALL_LIMIT_S}s)"
    )


class FaultTests:
    """Needs ``stop_server``/``start_server`` hooks (or ``set_available()`` on the backend)."""

    category = "faults"

    def _open(self, harness: Harness) -> Handle:
        extra = None
        if harness.sdk and "resilience" not in harness.options:
            extra = {"resilience": FAST_RESILIENCE}
        return harness.open(config=harness.config(extra=extra))

    def test_faults_server_stopped_then_restarted(self, harness: Harness) -> None:
        handle = self._open(harness)
        stored, fresh = harness.keys(2)
        assert handle.put([stored], versions=1) == [True]
        try:
            harness.stop_server(handle)
        except SideChannelUnavailable as exc:
            pytest.skip(f"no way to stop the server: {exc}")
        backend, pool = handle.backend, handle.pool
        write_slot(pool, 0, handle.content(fresh, 1))
        value = tensor_of(pool, handle.content(fresh, 1))
        timings: dict[str, float] = {}
        calls: list[tuple[str, Callable[[], Any], Any]] = [
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
        for name, call, expected in calls:
            _call(name, call, expected, timings)
        harness.start_server(handle)
        deadline = time.monotonic() + RECOVERY_S
        while True:
            ok = handle.put([fresh], versions=2) == [True] and handle.fetch([fresh]) == [handle.content(fresh, 2)]
            if ok:
                break
            assert time.monotonic() < deadline, f"the backend did not work again within {RECOVERY_S}s of the restart"
            time.sleep(0.05)
