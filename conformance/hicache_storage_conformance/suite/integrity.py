"""integrity: a truncated, corrupted or vanished stored page reads as a miss, never as wrong bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ..harness import Handle, Harness
from ..side_channel import SideChannelUnavailable


def _damage(harness: Harness, handle: Handle, key: str, how: Callable[[Any, str], None]) -> None:
    storage_key = handle.storage_key(key)
    try:
        stored = harness.hooks.read_stored(handle.backend, storage_key)
    except SideChannelUnavailable as exc:
        pytest.skip(f"no side channel to reach stored pages: {exc}")
    assert stored is not None, f"side channel found nothing stored under {storage_key!r} after a successful write"
    how(handle.backend, storage_key)


def _check_neighbours(harness: Harness, handle: Handle, damaged: str, what: str) -> None:
    before, after = harness.keys(2)
    assert handle.put([before, after], versions=1) == [True, True]
    got = handle.fetch([before, damaged, after])
    assert got[1] is None, f"a {what} stored page was returned as data; it must read as a miss"
    assert got[0] == handle.content(before, 1) and got[2] == handle.content(after, 1), (
        f"pages next to a {what} one in the same batch must still read back exactly"
    )


class IntegrityTests:
    """Needs a side channel (hooks or raw_store()/path_for()); corruption also needs verifies_integrity."""

    category = "integrity"

    def test_integrity_truncated_page_is_a_miss(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.put([key]) == [True]
        _damage(harness, handle, key, harness.hooks.truncate_stored)
        _check_neighbours(harness, handle, key, "truncated")
        assert handle.get_v0([key]) == [None], "a truncated stored page was returned by batch_get"

    def test_integrity_corrupted_page_is_a_miss(self, harness: Harness) -> None:
        harness.require("verifies_integrity")
        handle = harness.open()
        key = harness.key()
        assert handle.put([key]) == [True]
        _damage(harness, handle, key, harness.hooks.corrupt_stored)
        _check_neighbours(harness, handle, key, "corrupted")
        assert handle.get_v0([key]) == [None], "a corrupted stored page was returned by batch_get"

    def test_integrity_vanished_page_is_a_miss(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.put([key]) == [True]
        _damage(harness, handle, key, harness.hooks.delete_stored)
        _check_neighbours(harness, handle, key, "deleted (behind the backend's back)")
