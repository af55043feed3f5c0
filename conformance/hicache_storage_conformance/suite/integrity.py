"""integrity: a truncated, corrupted or vanished stored page reads as a miss, never as wrong bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..checks import check, describe_page
from ..harness import Handle, Harness
from ..hooks import SideChannelUnavailable

RULE = "a page that fails its integrity check (wrong length, checksum mismatch, gone) reads as a miss"


def _damage(harness: Harness, handle: Handle, key: str, how: Callable[[Any, str], None]) -> None:
    storage_key = handle.storage_key(key)
    try:
        stored = harness.hooks.read_stored(handle.implementation, storage_key)
    except SideChannelUnavailable as exc:
        harness.skip_no_side_channel(exc)
    check(
        stored is not None,
        f"the side channel's read_stored({storage_key!r}) after a successful write",
        "the stored bytes",
        "None (nothing stored under the storage key the caller API maps the page hash to)",
    )
    how(handle.implementation, storage_key)


def _check_neighbours(harness: Harness, handle: Handle, damaged: str, what: str) -> None:
    before, after = harness.keys(2)
    handle.store([before, after], 1, "writing the two neighbours")
    keys = [before, damaged, after]
    got = handle.fetch(keys)
    check(
        got[1] is None,
        f"reading a {what} stored page (middle of 3)",
        "a miss",
        describe_page(got[1], damaged, 0),
        rule=RULE,
    )
    handle.check_pages(got, keys, [1, None, 1], f"reading the neighbours of a {what} page in one batch", rule=RULE)


def _check_damaged(harness: Harness, how: Callable[[Any, str], None], what: str) -> None:
    """Write a page, damage it through the side channel with ``how``, and check it reads as a miss
    (also between two good neighbours, and through ``batch_get``)."""
    handle = harness.open()
    key = harness.key()
    handle.store([key], 0, f"writing the page to leave {what}")
    _damage(harness, handle, key, how)
    _check_neighbours(harness, handle, key, what)
    handle.check_pages(handle.get_v0([key]), [key], [None], f"batch_get of the {what} page", rule=RULE)


class IntegrityTests:
    """Needs a side channel (the conformance hooks); corruption also needs verifies_integrity."""

    category = "integrity"

    def test_integrity_truncated_page_is_a_miss(self, harness: Harness) -> None:
        """A stored page cut to half its length reads as a miss (batch neighbours read exactly)."""
        _check_damaged(harness, harness.hooks.truncate_stored, "truncated")

    def test_integrity_corrupted_page_is_a_miss(self, harness: Harness) -> None:
        """A stored page with one byte flipped reads as a miss (needs verifies_integrity)."""
        harness.require("verifies_integrity")
        _check_damaged(harness, harness.hooks.corrupt_stored, "corrupted")

    def test_integrity_vanished_page_is_a_miss(self, harness: Harness) -> None:
        """A stored page removed behind the backend's back reads as a miss."""
        _check_damaged(harness, harness.hooks.delete_stored, "deleted (behind the backend's back)")
