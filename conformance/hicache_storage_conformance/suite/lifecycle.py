"""lifecycle: construct, context manager, close (idempotent, later calls raise), reopen, bad options."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from hicache_storage import ConfigError

from ..checks import Mismatch, check, check_equal
from ..harness import Harness
from ..pages import host_indices, make_pool

UNKNOWN_OPTION = "conformance_no_such_option"


class LifecycleTests:
    """Construction and shutdown."""

    category = "lifecycle"

    def test_lifecycle_construct_and_use(self, harness: Harness) -> None:
        """A fresh instance on the given config stores a page and reads it back."""
        handle = harness.open()
        key = harness.key()
        handle.store([key], 0, "writing one page to a fresh instance")
        handle.expect([key], 0, "reading it back")

    def test_lifecycle_context_manager(self, harness: Harness) -> None:
        """The backend is a context manager: __enter__ returns it, leaving the block closes it."""
        harness.require_sdk("the context manager")
        backend = harness.target.construct(harness.config())
        with backend as entered:
            check(entered is backend, "__enter__()", "the backend itself", repr(entered))
            entered.register_mem_pool_host(make_pool(harness.open().spec))
            check_equal(entered.batch_exists([harness.key()]), 0, "batch_exists of an absent key inside the block")
        check_equal(backend.closed, True, "backend.closed after leaving the with-block")

    def test_lifecycle_close_is_idempotent_and_final(self, harness: Harness) -> None:
        """close() may be called twice; every storage call after it raises a ValueError subclass."""
        harness.require_sdk("close()")
        handle = harness.open()
        key = harness.key()
        handle.store([key], 0, "writing a page before close()")
        backend = handle.backend
        handle.close()
        backend.close()  # second close: no error
        check_equal(backend.closed, True, "backend.closed after close()")
        calls: dict[str, Callable[[], Any]] = {
            "batch_get_v1": lambda: backend.batch_get_v1([key], host_indices(handle.pool, [0])),
            "batch_set_v1": lambda: backend.batch_set_v1([key], host_indices(handle.pool, [0])),
            "batch_exists": lambda: backend.batch_exists([key]),
            "exists": lambda: backend.exists(key),
            "batch_get": lambda: backend.batch_get([key]),
        }
        for name, call in calls.items():
            try:
                result = call()
            except ValueError:
                continue
            except Exception as exc:
                raise Mismatch(
                    f"{name} after close()", "a ValueError subclass", f"{type(exc).__name__}: {exc}"
                ) from exc
            raise Mismatch(f"{name} after close()", "a ValueError subclass raised", f"it returned {result!r}")
        harness.open(config=handle.config)  # an open instance on the store, so the clean-up removes the page

    def test_lifecycle_reopen_same_config(self, harness: Harness) -> None:
        """A second instance on the same config, after the first is closed, writes and reads pages."""
        first = harness.open()
        key = harness.key()
        first.store([key], 0, "writing a page with the first instance")
        first.close()
        second = harness.open(config=first.config)
        other = harness.key()
        second.store([other], 0, "a second instance on the same config writing a page")
        second.expect([other], 0, "the second instance reading it back")

    def test_lifecycle_unknown_option_is_rejected(self, harness: Harness) -> None:
        """An unknown option raises ConfigError naming it (a typo never falls back to a default)."""
        harness.require_sdk("option validation")
        config = harness.config(extra={UNKNOWN_OPTION: 1})
        try:
            built = harness.target.construct(config)
        except ConfigError as exc:
            check(
                UNKNOWN_OPTION in str(exc),
                "the ConfigError for an unknown option",
                f"naming {UNKNOWN_OPTION!r}",
                str(exc),
            )
            return
        except Exception as exc:
            raise Mismatch(f"constructing with extra_config.{UNKNOWN_OPTION}", "ConfigError", repr(exc)) from exc
        with contextlib.suppress(Exception):
            built.close()
        raise Mismatch(
            f"constructing with extra_config.{UNKNOWN_OPTION}", "ConfigError naming the option", "an instance"
        )
