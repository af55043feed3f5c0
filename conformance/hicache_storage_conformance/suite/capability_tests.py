"""Tests switched on by a declared capability: persistence, delete, clear, eviction."""

from __future__ import annotations

from .. import skips
from ..checks import Mismatch, check_equal, describe_page
from ..harness import Harness
from ..pages import PoolSpec


class PersistenceTests:
    """``persistent``: a new instance on the same config sees pages written before ``close()``."""

    category = "persistence"

    def test_persistence_new_instance_sees_pages(self, harness: Harness) -> None:
        """A persistent backend's pages survive close(): a new instance on the same config reads them."""
        harness.require("persistent")
        first = harness.open()
        keys = first.store_fresh(4, 6, "writing 4 pages before close()")
        first.close()
        second = harness.open(first.spec, config=first.config)
        second.expect(keys, 6, "a new instance on the same config reading them after close()")


class DeleteTests:
    """``supports_delete``: deleted pages are gone, others untouched; deleting an absent key is fine."""

    category = "delete"

    def test_delete_removes_only_named_pages(self, harness: Harness) -> None:
        """delete() removes exactly the named pages (exists and both read paths), reports True for absent
        keys too, and the key is writable again."""
        harness.require_sdk("delete()")
        harness.require("supports_delete")
        handle = harness.open()
        a, b, c, absent = harness.keys(4)
        handle.store([a, b, c], 2, "writing 3 pages")
        check_equal(handle.delete([a, absent]), [True, True], "delete([stored, absent])")
        check_equal(handle.exists_each([a, absent]), [False, False], "exists of the deleted and the absent key")
        handle.expect([a, b, c], [None, 2, 2], "reading the deleted page and its neighbours")
        handle.check_pages(handle.get_v0([a]), [a], [None], "batch_get of the deleted page")
        check_equal(handle.delete([]), [], "delete([])")
        handle.store([a], 3, "writing the deleted key again")
        handle.expect([a], 3, "reading the key written again after its delete")


class ClearTests:
    """``supports_clear``: ``clear()`` removes every page; the backend stays usable."""

    category = "clear"

    def test_clear_removes_everything(self, harness: Harness) -> None:
        """clear() removes every page of the instance (exists and reads) and the backend stays usable."""
        harness.require("supports_clear")
        handle = harness.open()
        keys = handle.store_fresh(5, 0, "writing 5 pages")
        check_equal(handle.backend.clear(), None, "clear()")
        check_equal(handle.exists_each(keys), [False] * 5, "exists of the 5 pages after clear()")
        handle.expect(keys, [None] * 5, "reading the 5 pages after clear()")
        handle.store(keys[:1], 4, "writing a page after clear()")
        handle.expect(keys[:1], 4, "reading it back")


class EvictionTests:
    """``may_evict``: under pressure, a read returns a miss or the exact bytes, never wrong bytes."""

    category = "eviction"

    def test_eviction_miss_or_exact(self, harness: Harness) -> None:
        """Under eviction pressure (512 pages) every read is a miss or the exact bytes, never wrong bytes."""
        harness.require("may_evict")
        handle = harness.open(PoolSpec(num_pages=256))
        keys = harness.keys(512)
        for begin in range(0, len(keys), 128):
            chunk = keys[begin : begin + 128]
            handle.put(chunk, versions=1)
        misses = 0
        for begin in range(0, len(keys), 128):
            chunk = keys[begin : begin + 128]
            for index, (key, data) in enumerate(zip(chunk, handle.fetch(chunk))):
                if data is None:
                    misses += 1
                    continue
                if data != handle.content(key, 1):
                    raise Mismatch(
                        f"reading page {begin + index} of 512 under eviction pressure",
                        "a miss or the exact bytes",
                        describe_page(data, key, 1, others=chunk),
                        rule="an evicting backend returns a miss, never wrong bytes",
                    )
        if misses == 0:
            harness.skip(
                skips.UNOBSERVED,
                "no page was evicted at this volume (512 pages); only exactness was checked",
                f"configure a capacity well under 512 pages of {handle.page_bytes} bytes so eviction happens",
            )
