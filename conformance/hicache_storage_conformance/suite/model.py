"""model: a Hypothesis state machine of set/get/exists/delete/clear checked against a dict."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from ..checks import Mismatch, check_equal, describe_page
from ..harness import Handle, Harness

KEY_COUNT = 4
STEPS = 12


def _machine(harness: Harness) -> type[RuleBasedStateMachine]:
    caps = harness.caps
    indices = st.lists(st.integers(0, KEY_COUNT - 1), min_size=1, max_size=4)

    class StorageMachine(RuleBasedStateMachine):
        """Model: key index → version stored (absent = never written or deleted)."""

        def __init__(self) -> None:
            super().__init__()
            harness.renew_identity()
            self.handle: Handle = harness.open()
            self.keys = harness.keys(KEY_COUNT)
            self.model: dict[int, int] = {}
            self.version = 0

        def _check(self, picked: list[int], pages: list[bytes | None], how: str) -> None:
            rule = "a read returns the last acknowledged write of the key; a key never written or deleted misses"
            for index, data in zip(picked, pages):
                expected = self.model.get(index)
                if expected is None and data is None:
                    continue
                if data is None and caps.may_evict:
                    continue
                want = "a miss (never written, or deleted)" if expected is None else f"version {expected} of the key"
                if expected is None or data != self.handle.content(self.keys[index], expected):
                    got = describe_page(data, self.keys[index], expected, others=self.keys)
                    raise Mismatch(f"{how}, key {index}", want, got, rule=rule)

        def _stats(self) -> str:
            """The backend's statistics, for a failure message (empty when it has none)."""
            get_stats = getattr(self.handle.backend, "get_stats", None)
            return f"backend stats: {get_stats()}" if callable(get_stats) else ""

        @rule(picked=indices, v0=st.booleans())
        def write(self, picked: list[int], v0: bool) -> None:
            self.version += 1
            unique = list(dict.fromkeys(picked))
            keys = [self.keys[i] for i in unique]
            rule = "a write to a working backend is acknowledged (True)"
            if v0 or not harness.target.has_v1:
                done: object = self.handle.set_v0(keys, self.version)
                check_equal(done, True, f"batch_set of keys {unique}", rule=rule, hint=self._stats())
            else:
                done = self.handle.set_v1(keys, self.version)
                check_equal(done, [True] * len(keys), f"batch_set_v1 of keys {unique}", rule=rule, hint=self._stats())
            for index in unique:
                self.model[index] = self.version
            # an acknowledged write is readable at once (the last write wins)
            self._check(unique, self.handle.fetch(keys), "reading the keys right after writing them")

        @rule(picked=indices, v0=st.booleans())
        def read(self, picked: list[int], v0: bool) -> None:
            keys = [self.keys[i] for i in picked]
            pages = self.handle.get_v0(keys) if v0 or not harness.target.has_v1 else self.handle.get_v1(keys)
            self._check(picked, pages, "batch_get" if v0 else "batch_get_v1")

        @rule(picked=indices)
        def exists(self, picked: list[int]) -> None:
            keys = [self.keys[i] for i in picked]
            each = self.handle.exists_each(keys)
            rule = "exists is True exactly for keys written and not deleted since"
            for index, hit in zip(picked, each):
                if not caps.may_evict:
                    check_equal(hit, index in self.model, f"batch_exists_each, key {index}", rule=rule)
                elif hit is False:
                    self.model.pop(index, None)
            leading = next((i for i, hit in enumerate(each) if not hit), len(each))
            count = self.handle.exists_prefix(keys)
            if not caps.may_evict:
                rule = "batch_exists counts the leading run of existing keys"
                check_equal(count, leading, f"batch_exists of keys {picked}", rule=rule)

        @precondition(lambda self: harness.sdk and caps.supports_delete)
        @rule(picked=indices)
        def delete(self, picked: list[int]) -> None:
            keys = [self.keys[i] for i in picked]
            done = self.handle.delete(keys)
            check_equal(done, [True] * len(picked), f"delete of keys {picked}", rule="delete reports True per key")
            for index in picked:
                self.model.pop(index, None)
            rule = "a deleted page is gone: exists is False and a read misses"
            check_equal(
                self.handle.exists_each(keys), [False] * len(keys), f"exists right after delete of {picked}", rule=rule
            )

        @precondition(lambda self: caps.supports_clear)
        @rule()
        def clear(self) -> None:
            self.handle.backend.clear()
            self.model.clear()

        def teardown(self) -> None:
            harness.cleanup()

    return StorageMachine


class ModelTests:
    """Random sequences of calls agree with a dictionary (``--max-examples`` sets how many)."""

    category = "model"
    max_examples = 25

    def test_model_state_machine(self, harness: Harness) -> None:
        """Random sequences of write (v1/v0), read, exists, delete and clear agree with a dictionary model;
        a failure reports the shrunk sequence of steps."""
        machine = _machine(harness)
        config: Any = settings(
            max_examples=int(self.max_examples),
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            derandomize=False,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        )
        run: Any = run_state_machine_as_test
        run(machine, settings=config)
