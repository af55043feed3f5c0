"""overwrite: writing an existing key again succeeds and never leaves stale or mixed bytes."""

from __future__ import annotations

from ..checks import check_equal
from ..harness import Handle, Harness

RULE = "overwrites: last write wins; writing a stored key again succeeds"


def _write_twice(harness: Harness, second: int, writing: str, reading: str) -> tuple[Handle, str]:
    """Write a page at version 1, then at version ``second``, and check it reads back at ``second``."""
    handle = harness.open()
    key = harness.key()
    handle.store([key], 1, "the first write of a page", rule=RULE)
    handle.store([key], second, writing, rule=RULE)
    handle.expect([key], second, reading, rule=RULE)
    return handle, key


class OverwriteTests:
    """Idempotent rewrites and last-write-wins for sequential writes."""

    category = "overwrite"

    def test_overwrite_same_page_again(self, harness: Harness) -> None:
        """Writing a key that is already stored, with the same page, succeeds and the page reads back."""
        _write_twice(harness, 1, "writing the same page again", "reading it after the second write")

    def test_overwrite_new_bytes_win(self, harness: Harness) -> None:
        """After an acknowledged overwrite a read returns the new bytes, never the old page or a mix (v1 and v0)."""
        handle, key = _write_twice(harness, 2, "overwriting it with version 2", "reading it after the overwrite")
        check_equal(
            handle.set_v0([key], versions=3), True, "overwriting it through batch_set with version 3", rule=RULE
        )
        handle.check_pages(handle.get_v0([key]), [key], 3, "reading it through batch_get after the v0 overwrite")

    def test_overwrite_part_of_a_batch(self, harness: Harness) -> None:
        """Overwriting every other key of a batch leaves each key with its own last write."""
        handle = harness.open()
        keys = handle.store_fresh(12, 1, "writing 12 pages", rule=RULE)
        odd = keys[1::2]
        handle.store(odd, 2, "overwriting the 6 odd keys", rule=RULE)
        versions = [2 if index % 2 else 1 for index in range(12)]
        handle.expect(keys, versions, "reading all 12 after the partial overwrite", rule=RULE)
