"""model: a Hypothesis state machine of set/get/exists/delete/clear checked against a dict."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from ..harness import Handle, Harness

KEY_COUNT = 6
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
            for index, data in zip(picked, pages):
                expected = self.model.get(index)
                if data is None:
                    assert expected is None or caps.may_evict, f"{how}: key {index} (version {expected}) read as a miss"
                    continue
                assert expected is not None, f"{how}: key {index} was never written (or was deleted) but read as a hit"
                assert data == self.handle.content(self.keys[index], expected), (
                    f"{how}: key {index} returned bytes other than version {expected}"
                )

        def _stats(self) -> str:
            """The backend's statistics, for a failure message (empty when it has none)."""
            get_stats = getattr(self.handle.backend, "get_stats", None)
            return f"; backend stats: {get_stats()}" if callable(get_stats) else ""

        @rule(picked=indices, v0=st.booleans())
        def write(self, picked: list[int], v0: bool) -> None:
            self.version += 1
            unique = list(dict.fromkeys(picked))
            keys = [self.keys[i] for i in unique]
            if v0 or not harness.target.has_v1:
                done: object = self.handle.set_v0(keys, self.version)
                assert done is True, f"batch_set returned {done!r}{self._stats()}"
            else:
                done = self.handle.set_v1(keys, self.version)
                assert done == [True] * len(keys), f"batch_set_v1 returned {done!r}{self._stats()}"
            for index in unique:
                self.model[index] = self.version

        @rule(picked=indices, v0=st.booleans())
        def read(self, picked: list[int], v0: bool) -> None:
            keys = [self.keys[i] for i in picked]
            pages = self.handle.get_v0(keys) if v0 or not harness.target.has_v1 else self.handle.get_v1(keys)
            self._check(picked, pages, "batch_get" if v0 else "batch_get_v1")

        @rule(picked=indices)
        def exists(self, picked: list[int]) -> None:
            keys = [self.keys[i] for i in picked]
            each = self.handle.exists_each(keys)
            for index, hit in zip(picked, each):
                if not caps.may_evict:
                    assert hit == (index in self.model), (
                        f"exists of key {index} is {hit}; model says {index in self.model}"
                    )
                elif hit is False:
                    self.model.pop(index, None)
            leading = next((i for i, hit in enumerate(each) if not hit), len(each))
            count = self.handle.exists_prefix(keys)
            if not caps.may_evict:
                assert count == leading, f"batch_exists returned {count}; the leading run of existing keys is {leading}"

        @precondition(lambda self: harness.sdk and caps.supports_delete)
        @rule(picked=indices)
        def delete(self, picked: list[int]) -> None:
            assert self.handle.delete([self.keys[i] for i in picked]) == [True] * len(picked), "delete failed"
            for index in picked:
                self.model.pop(index, None)

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
        machine = _machine(harness)
        config: Any = settings(
            max_examples=int(self.max_examples),
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        run_state_machine_as_test(machine, settings=config)
