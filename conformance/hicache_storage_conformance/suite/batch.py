"""batch: result order, empty and duplicate batches, mixed hits, prefix counts, large batches, slot offsets."""

from __future__ import annotations

import random

from ..harness import Harness
from ..pages import PoolSpec, read_slot, verify_page, write_slot


class BatchTests:
    """Batch calls answer per key, in order, whatever the batch looks like."""

    category = "batch"

    def test_batch_result_order(self, harness: Harness) -> None:
        handle = harness.open()
        keys = harness.keys(8)
        assert handle.put(keys, versions=list(range(8))) == [True] * 8
        order = keys[::-1]
        random.Random(7).shuffle(order)
        for key, data in zip(order, handle.fetch(order)):
            if data is None and harness.caps.may_evict:
                continue
            assert data is not None, "a page just written was reported missing"
            problem = verify_page(key, data, [keys.index(key)])
            assert problem is None, f"results out of order: {problem}"

    def test_batch_empty(self, harness: Harness) -> None:
        handle = harness.open()
        backend = handle.backend
        assert backend.batch_exists([]) == 0, "batch_exists([]) must be 0"
        assert backend.batch_get([], []) == [], "batch_get([]) must be []"
        assert backend.batch_set([], []) is True, "batch_set([]) must be True (all of nothing succeeded)"
        if harness.target.has_v1:
            assert handle.set_v1([]) == [], "batch_set_v1([]) must be []"
            assert handle.get_v1([]) == [], "batch_get_v1([]) must be []"
        if harness.sdk:
            assert handle.exists_each([]) == [], "batch_exists_each([]) must be []"

    def test_batch_duplicate_keys(self, harness: Harness) -> None:
        handle = harness.open()
        key, other = harness.keys(2)
        assert handle.put([key, other, key], versions=4) == [True] * 3, "a batch repeating a key must succeed"
        expected = handle.content(key, 4)
        assert handle.same(handle.fetch([key, key, other]), [expected, expected, handle.content(other, 4)]), (
            "reading a key twice in one batch must return its page twice"
        )
        assert handle.exists_prefix([key, key, other]) == 3 or harness.caps.may_evict

    def test_batch_mixed_hits_and_misses(self, harness: Harness) -> None:
        handle = harness.open()
        a, b, c, d = harness.keys(4)
        assert handle.put([a, c]) == [True, True]
        got = handle.fetch([a, b, c, d])
        assert handle.same(got, [handle.content(a), None, handle.content(c), None]), (
            "a batch mixing hits and misses must return each hit's bytes and a miss for each absent key"
        )
        assert handle.exists_each([a, b, c, d]) == [True, False, True, False] or harness.caps.may_evict, (
            "per-key existence is wrong"
        )
        assert handle.fetch([b, d]) == [None, None], "an all-miss read must return one miss per key"
        assert handle.same(handle.get_v0([b, a]), [None, handle.content(a)]), "v0 read of a miss must be None"

    def test_batch_exists_counts_leading_run(self, harness: Harness) -> None:
        handle = harness.open()
        a, b, c, d = harness.keys(4)
        assert handle.put([a, c, d]) == [True] * 3
        cases = {(a, b, c): 1, (a, c, d): 3, (b, a, c): 0, (a, c, b, d): 2, (d,): 1, (b,): 0}
        for keys, expected in cases.items():
            count = handle.exists_prefix(list(keys))
            assert count == expected, (
                f"batch_exists must count the leading run of existing keys: expected {expected}, got {count}"
                " (a total count of hits is wrong)"
            )
            each = handle.exists_each(list(keys))
            leading = next((i for i, hit in enumerate(each) if not hit), len(each))
            assert leading == count, f"batch_exists ({count}) disagrees with per-key existence {each}"

    def test_batch_of_128(self, harness: Harness) -> None:
        handle = harness.open(PoolSpec(num_pages=130))
        keys = harness.keys(128)
        assert handle.put(keys, versions=1) == [True] * 128, "a batch of 128 pages (SGLang's batch size) failed"
        assert handle.same(handle.fetch(keys), [handle.content(k, 1) for k in keys]), (
            "a batch of 128 pages read back wrong"
        )
        assert handle.exists_prefix(keys) == 128 or harness.caps.may_evict

    def test_batch_larger_than_max_batch_size(self, harness: Harness) -> None:
        count = min(2 * int(harness.caps.max_batch_size or 64) + 3, 2051)
        handle = harness.open(PoolSpec(num_pages=count))
        keys = harness.keys(count)
        assert handle.put(keys, versions=2) == [True] * count, f"a batch of {count} pages failed"
        got = handle.fetch(keys)
        wrong = [i for i, (k, data) in enumerate(zip(keys, got)) if not handle.same([data], [handle.content(k, 2)])]
        assert not wrong, (
            f"a batch of {count} pages (max_batch_size {harness.caps.max_batch_size}) misread pages {wrong[:5]}"
        )
        assert handle.exists_prefix(keys) == count or harness.caps.may_evict

    def test_batch_host_slot_offsets(self, harness: Harness) -> None:
        harness.require_v1()
        handle = harness.open()
        guard = bytes([0x3C]) * handle.page_bytes
        for slot in range(handle.pool.page_num):
            write_slot(handle.pool, slot, guard)
        keys = harness.keys(3)
        assert handle.set_v1(keys, versions=5, slots=[7, 2, 11]) == [True] * 3
        for slot in range(handle.pool.page_num):
            if slot not in (7, 2, 11):
                write_slot(handle.pool, slot, guard)
        got = handle.get_v1(keys, slots=[4, 9, 13])
        assert handle.same(got, [handle.content(k, 5) for k in keys]), (
            "pages were not read into the host slots asked for"
        )
        touched = [
            s
            for s in range(handle.pool.page_num)
            if s not in (4, 9, 13, 7, 2, 11) and read_slot(handle.pool, s) != guard
        ]
        assert not touched, f"a read wrote host slots {touched} outside the host_indices it was given"
