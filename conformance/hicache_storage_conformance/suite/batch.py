"""batch: result order, empty and duplicate batches, mixed hits, prefix counts, large batches, slot offsets."""

from __future__ import annotations

import random

from ..checks import Mismatch, check, check_equal
from ..harness import Harness
from ..pages import PoolSpec, read_slot, verify_page, write_slot


class BatchTests:
    """Batch calls answer per key, in order, whatever the batch looks like."""

    category = "batch"

    def test_batch_result_order(self, harness: Harness) -> None:
        """Results come back in request order, whatever the order of the keys."""
        handle = harness.open()
        keys = handle.store_fresh(8, list(range(8)), "writing 8 pages (versions 0..7)")
        order = keys[::-1]
        random.Random(7).shuffle(order)
        for index, (key, data) in enumerate(zip(order, handle.fetch(order))):
            if data is None and harness.caps.may_evict:
                continue
            check(data is not None, f"reading 8 pages in shuffled order, result {index}", "a hit", "a miss")
            assert data is not None
            problem = verify_page(key, data, [keys.index(key)])
            check(problem is None, f"reading 8 pages in shuffled order, result {index}", "its own key's page", problem)

    def test_batch_empty(self, harness: Harness) -> None:
        """Empty batches answer 0, [], True: never None, never an error."""
        handle = harness.open()
        backend = handle.backend
        check_equal(backend.batch_exists([]), 0, "batch_exists([])")
        check_equal(backend.batch_get([], []), [], "batch_get([], [])")
        check_equal(backend.batch_set([], []), True, "batch_set([], []) (all of nothing succeeded)")
        if harness.target.has_v1:
            check_equal(handle.set_v1([]), [], "batch_set_v1([])")
            check_equal(handle.get_v1([]), [], "batch_get_v1([])")
        if harness.sdk:
            check_equal(handle.exists_each([]), [], "batch_exists_each([])")

    def test_batch_duplicate_keys(self, harness: Harness) -> None:
        """A batch repeating a key succeeds, and reading a key twice returns its page twice."""
        handle = harness.open()
        key, other = harness.keys(2)
        handle.store([key, other, key], 4, "writing [key, other, key]")
        handle.expect([key, key, other], 4, "reading [key, key, other]")
        if not harness.caps.may_evict:
            check_equal(handle.exists_prefix([key, key, other]), 3, "batch_exists([key, key, other])")

    def test_batch_mixed_hits_and_misses(self, harness: Harness) -> None:
        """A batch mixing hits and misses returns each hit's bytes and a miss (False / None) per absent key."""
        handle = harness.open()
        a, b, c, d = harness.keys(4)
        handle.store([a, c], 0, "writing keys 0 and 2 of 4")
        handle.expect([a, b, c, d], [0, None, 0, None], "reading all 4")
        if not harness.caps.may_evict:
            check_equal(handle.exists_each([a, b, c, d]), [True, False, True, False], "per-key existence of all 4")
        handle.expect([b, d], [None, None], "reading only the 2 absent keys")
        handle.check_pages(handle.get_v0([b, a]), [b, a], [None, 0], "batch_get of [absent, stored]")

    def test_batch_exists_counts_leading_run(self, harness: Harness) -> None:
        """batch_exists counts the leading run of existing keys (not the total of hits) and agrees with
        per-key existence."""
        handle = harness.open()
        a, b, c, d = harness.keys(4)
        handle.store([a, c, d], 0, "writing keys a, c, d (b absent)")
        names = {a: "a", b: "b", c: "c", d: "d"}
        cases = {(a, b, c): 1, (a, c, d): 3, (b, a, c): 0, (a, c, b, d): 2, (d,): 1, (b,): 0}
        rule = "batch_exists is the number of consecutive stored keys from the start"
        for keys, expected in cases.items():
            label = "[" + ", ".join(names[k] for k in keys) + "]"
            count = handle.exists_prefix(list(keys))
            check_equal(count, expected, f"batch_exists({label})", rule=rule, hint="a total count of hits is wrong")
            each = handle.exists_each(list(keys))
            leading = next((i for i, hit in enumerate(each) if not hit), len(each))
            check_equal(leading, count, f"the leading run of batch_exists_each({label}) = {each}", rule=rule)

    def test_batch_of_128(self, harness: Harness) -> None:
        """A batch of 128 pages (SGLang's batch size) round-trips."""
        handle = harness.open(PoolSpec(num_pages=130))
        keys = handle.store_fresh(128, 1, "writing 128 pages in one batch")
        handle.expect(keys, 1, "reading 128 pages in one batch")
        if not harness.caps.may_evict:
            check_equal(handle.exists_prefix(keys), 128, "batch_exists of the 128 pages")

    def test_batch_larger_than_max_batch_size(self, harness: Harness) -> None:
        """A batch of 2 x max_batch_size + 3 pages round-trips (the base class splits it into chunks)."""
        count = min(2 * int(harness.caps.max_batch_size or 64) + 3, 2051)
        handle = harness.open(PoolSpec(num_pages=count))
        keys = handle.store_fresh(count, 2, f"writing {count} pages in one batch")
        handle.expect(keys, 2, f"reading {count} pages in one batch")
        if not harness.caps.may_evict:
            check_equal(handle.exists_prefix(keys), count, f"batch_exists of the {count} pages")

    def test_batch_host_slot_offsets(self, harness: Harness) -> None:
        """v1 calls use exactly the host slots their host_indices name, and a read writes no other slot."""
        harness.require_v1()
        handle = harness.open()
        guard = bytes([0x3C]) * handle.page_bytes
        for slot in range(handle.pool.page_num):
            write_slot(handle.pool, slot, guard)
        keys = harness.keys(3)
        check_equal(handle.set_v1(keys, versions=5, slots=[7, 2, 11]), [True] * 3, "batch_set_v1 from slots 7, 2, 11")
        for slot in range(handle.pool.page_num):
            if slot not in (7, 2, 11):
                write_slot(handle.pool, slot, guard)
        handle.check_pages(handle.get_v1(keys, slots=[4, 9, 13]), keys, 5, "batch_get_v1 into slots 4, 9, 13")
        touched = [
            s
            for s in range(handle.pool.page_num)
            if s not in (4, 9, 13, 7, 2, 11) and read_slot(handle.pool, s) != guard
        ]
        if touched:
            raise Mismatch(
                "batch_get_v1 into slots 4, 9, 13",
                "no other host slot written",
                f"slots {touched} written",
                rule="a read writes only the host slots it was given",
            )
