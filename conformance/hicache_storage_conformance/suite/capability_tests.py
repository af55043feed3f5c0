"""Tests switched on by a declared capability: persistence, delete, clear, eviction."""

from __future__ import annotations

import pytest

from ..harness import Harness
from ..pages import PoolSpec


class PersistenceTests:
    """``persistent``: a new instance on the same config sees pages written before ``close()``."""

    category = "persistence"

    def test_persistence_new_instance_sees_pages(self, harness: Harness) -> None:
        harness.require("persistent")
        first = harness.open()
        keys = harness.keys(4)
        assert first.put(keys, versions=6) == [True] * 4
        first.close()
        second = harness.open(first.spec, config=first.config)
        for key, data in zip(keys, second.fetch(keys)):
            if data is None and harness.caps.may_evict:
                continue
            assert data == second.content(key, 6), "a persistent backend lost or changed a page across instances"


class DeleteTests:
    """``supports_delete``: deleted pages are gone, others untouched; deleting an absent key is fine."""

    category = "delete"

    def test_delete_removes_only_named_pages(self, harness: Harness) -> None:
        harness.require_sdk("delete()")
        harness.require("supports_delete")
        handle = harness.open()
        a, b, c, absent = harness.keys(4)
        assert handle.put([a, b, c], versions=2) == [True] * 3
        assert handle.delete([a, absent]) == [True, True], "delete must report True for removed and absent keys"
        assert handle.exists_each([a, absent]) == [False, False], "delete left a page visible"
        assert handle.same(handle.fetch([a, b, c]), [None, handle.content(b, 2), handle.content(c, 2)]), (
            "a deleted page is still readable, or a neighbour changed"
        )
        assert handle.get_v0([a]) == [None], "a deleted page is still readable through batch_get"
        assert handle.delete([]) == []
        assert handle.put([a], versions=3) == [True], "a deleted key must be writable again"
        assert handle.same(handle.fetch([a]), [handle.content(a, 3)])


class ClearTests:
    """``supports_clear``: ``clear()`` removes every page; the backend stays usable."""

    category = "clear"

    def test_clear_removes_everything(self, harness: Harness) -> None:
        harness.require("supports_clear")
        handle = harness.open()
        keys = harness.keys(5)
        assert handle.put(keys) == [True] * 5
        assert handle.backend.clear() is None
        assert handle.exists_each(keys) == [False] * 5, "pages still exist after clear()"
        assert handle.fetch(keys) == [None] * 5, "pages still readable after clear()"
        assert handle.put(keys[:1], versions=4) == [True], "the backend must stay usable after clear()"
        assert handle.same(handle.fetch(keys[:1]), [handle.content(keys[0], 4)])


class EvictionTests:
    """``may_evict``: under pressure, a read returns a miss or the exact bytes, never wrong bytes."""

    category = "eviction"

    def test_eviction_miss_or_exact(self, harness: Harness) -> None:
        harness.require("may_evict")
        handle = harness.open(PoolSpec(num_pages=256))
        keys = harness.keys(512)
        for begin in range(0, len(keys), 128):
            chunk = keys[begin : begin + 128]
            handle.put(chunk, versions=1)
        misses = 0
        for begin in range(0, len(keys), 128):
            chunk = keys[begin : begin + 128]
            exists = handle.exists_each(chunk)
            for key, data, there in zip(chunk, handle.fetch(chunk), exists):
                if data is None:
                    misses += 1
                    continue
                assert data == handle.content(key, 1), "an evicting backend returned wrong bytes instead of a miss"
                assert there or harness.caps.may_evict, "a readable page was reported missing"
        if misses == 0:
            pytest.skip("no page was evicted at this volume (512 pages); only exactness was checked")
