"""overwrite: writing an existing key again succeeds and never leaves stale or mixed bytes."""

from __future__ import annotations

from ..checks import check_equal
from ..harness import Harness

RULE = "overwrites: last write wins; writing a stored key again succeeds"


class OverwriteTests:
    """Idempotent rewrites and last-write-wins for sequential writes."""

    category = "overwrite"

    def test_overwrite_same_page_again(self, harness: Harness) -> None:
        """Writing a key that is already stored, with the same page, succeeds and the page reads back."""
        handle = harness.open()
        key = harness.key()
        check_equal(handle.put([key], versions=1), [True], "the first write of a page", rule=RULE)
        check_equal(handle.put([key], versions=1), [True], "writing the same page again", rule=RULE)
        handle.check_pages(handle.fetch([key]), [key], 1, "reading it after the second write", rule=RULE)

    def test_overwrite_new_bytes_win(self, harness: Harness) -> None:
        """After an acknowledged overwrite a read returns the new bytes, never the old page or a mix (v1 and v0)."""
        handle = harness.open()
        key = harness.key()
        check_equal(handle.put([key], versions=1), [True], "the first write of a page", rule=RULE)
        check_equal(handle.put([key], versions=2), [True], "overwriting it with version 2", rule=RULE)
        handle.check_pages(handle.fetch([key]), [key], 2, "reading it after the overwrite", rule=RULE)
        check_equal(
            handle.set_v0([key], versions=3), True, "overwriting it through batch_set with version 3", rule=RULE
        )
        handle.check_pages(handle.get_v0([key]), [key], 3, "reading it through batch_get after the v0 overwrite")

    def test_overwrite_part_of_a_batch(self, harness: Harness) -> None:
        """Overwriting every other key of a batch leaves each key with its own last write."""
        handle = harness.open()
        keys = harness.keys(12)
        check_equal(handle.put(keys, versions=1), [True] * 12, "writing 12 pages", rule=RULE)
        odd = keys[1::2]
        check_equal(handle.put(odd, versions=2), [True] * len(odd), "overwriting the 6 odd keys", rule=RULE)
        versions = [2 if index % 2 else 1 for index in range(12)]
        handle.check_pages(handle.fetch(keys), keys, versions, "reading all 12 after the partial overwrite", rule=RULE)
