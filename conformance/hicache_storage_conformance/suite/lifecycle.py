"""lifecycle: construct, context manager, close (idempotent, later calls raise), reopen, bad options."""

from __future__ import annotations

import pytest

from hicache_storage import ConfigError

from ..harness import Harness
from ..pages import host_indices, make_pool

UNKNOWN_OPTION = "conformance_no_such_option"


class LifecycleTests:
    """Construction and shutdown."""

    category = "lifecycle"

    def test_lifecycle_construct_and_use(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.put([key]) == [True], "writing one page to a fresh instance failed"
        assert handle.same(handle.fetch([key]), [handle.content(key)]), (
            "a fresh instance did not return the page just written"
        )

    def test_lifecycle_context_manager(self, harness: Harness) -> None:
        harness.require_sdk("the context manager")
        backend = harness.target.construct(harness.config())
        with backend as entered:
            assert entered is backend, "__enter__ must return the backend itself"
            entered.register_mem_pool_host(make_pool(harness.open().spec))
            assert entered.batch_exists([harness.key()]) == 0
        assert backend.closed, "leaving the with-block must close the backend"

    def test_lifecycle_close_is_idempotent_and_final(self, harness: Harness) -> None:
        harness.require_sdk("close()")
        handle = harness.open()
        key = harness.key()
        assert handle.put([key]) == [True]
        backend = handle.backend
        handle.close()
        backend.close()  # second close: no error
        assert backend.closed
        calls = {
            "batch_get_v1": lambda: backend.batch_get_v1([key], host_indices(handle.pool, [0])),
            "batch_set_v1": lambda: backend.batch_set_v1([key], host_indices(handle.pool, [0])),
            "batch_exists": lambda: backend.batch_exists([key]),
            "exists": lambda: backend.exists(key),
            "batch_get": lambda: backend.batch_get([key]),
        }
        for name, call in calls.items():
            with pytest.raises(ValueError):
                call()
                pytest.fail(f"{name} after close() returned instead of raising a ValueError subclass")

    def test_lifecycle_reopen_same_config(self, harness: Harness) -> None:
        first = harness.open()
        key = harness.key()
        assert first.put([key]) == [True]
        first.close()
        second = harness.open(config=first.config)
        other = harness.key()
        assert second.put([other]) == [True], "a second instance on the same config could not write"
        assert second.same(second.fetch([other]), [second.content(other)]), (
            "a second instance on the same config misread a page"
        )

    def test_lifecycle_unknown_option_is_rejected(self, harness: Harness) -> None:
        harness.require_sdk("option validation")
        config = harness.config(extra={UNKNOWN_OPTION: 1})
        with pytest.raises(ConfigError) as caught:
            harness.target.construct(config)
        assert UNKNOWN_OPTION in str(caught.value), (
            f"ConfigError for an unknown option must name it ({UNKNOWN_OPTION!r}); got: {caught.value}"
        )
