"""overwrite: writing an existing key again succeeds and never leaves stale or mixed bytes."""

from __future__ import annotations

from ..harness import Handle, Harness


def _expect_version(handle: Handle, key: str, version: int, data: bytes | None, how: str) -> None:
    if data is None and handle.harness.caps.may_evict:
        return
    assert data is not None, f"{how}: the key was reported missing after a successful overwrite"
    assert data == handle.content(key, version), (
        f"{how}: stale or mixed bytes after an overwrite (expected version {version})"
    )


class OverwriteTests:
    """Idempotent rewrites and last-write-wins for sequential writes."""

    category = "overwrite"

    def test_overwrite_same_page_again(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.put([key], versions=1) == [True]
        assert handle.put([key], versions=1) == [True], "writing the same page again must succeed"
        assert handle.same(handle.fetch([key]), [handle.content(key, 1)])

    def test_overwrite_new_bytes_win(self, harness: Harness) -> None:
        handle = harness.open()
        key = harness.key()
        assert handle.put([key], versions=1) == [True]
        assert handle.put([key], versions=2) == [True], "overwriting an existing key must succeed"
        _expect_version(handle, key, 2, handle.fetch([key])[0], "second write")
        assert handle.set_v0([key], versions=3) is True, "overwriting through batch_set must succeed"
        _expect_version(handle, key, 3, handle.get_v0([key])[0], "v0 overwrite")

    def test_overwrite_part_of_a_batch(self, harness: Harness) -> None:
        handle = harness.open()
        keys = harness.keys(12)
        assert handle.put(keys, versions=1) == [True] * 12
        odd = keys[1::2]
        assert handle.put(odd, versions=2) == [True] * len(odd)
        for index, (key, data) in enumerate(zip(keys, handle.fetch(keys))):
            _expect_version(handle, key, 2 if index % 2 else 1, data, f"key {index} of 12")
