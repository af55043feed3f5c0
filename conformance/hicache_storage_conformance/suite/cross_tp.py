"""cross_tp: with ``tp_lcm_size`` set, pages one TP size writes are read head by head by the others.

A page is ``tp_lcm_size`` head-shard records named by the heads they hold; a rank of any TP size
that divides ``tp_lcm_size`` finds its heads among what another TP size wrote, byte for byte, on
every host layout. A page with a missing shard is a miss for every reader that needs that shard;
a deployment with another ``tp_lcm_size`` never reads these shards. A backend that ``may_evict``
may miss a page that is due; a hit is always byte-exact.
"""

from __future__ import annotations

import pytest
import torch

from hicache_storage.testing import page_indices
from hicache_storage.testing.cross_tp import expected_heads, fill_rank, global_kv, rank_heads

from ..checks import check_equal
from ..harness import Handle, Harness
from ..pages import PoolSpec

LAYOUTS = ("page_head", "page_first", "layer_first", "page_first_direct")
#: Global KV heads of the suite's model, and the shards per page.
HEADS, LCM = 8, 4
RULE = "cross_tp: a page's head shards are named by the heads they hold, not by the rank that wrote them"


def _group(harness: Harness, tp_size: int, layout: str, lcm: int | None = LCM) -> list[Handle]:
    spec = PoolSpec(layout=layout, head_num=HEADS // tp_size, head_dim=4, layer_num=2, num_pages=16)
    group = []
    for rank in range(tp_size):
        config = harness.config(tp_rank=rank, tp_size=tp_size)
        config.tp_lcm_size = lcm
        group.append(harness.open(spec, config=config))
    return group


def _write(group: list[Handle], kv: torch.Tensor, keys: list[str], skip: dict[int, set[int]] | None = None) -> None:
    """Each rank stores its heads of ``kv`` under ``keys`` (rank ``r`` leaves out the slots in ``skip[r]``)."""
    tp_size = len(group)
    for rank, handle in enumerate(group):
        fill_rank(handle.pool, kv, rank, tp_size)
        slots = [slot for slot in range(len(keys)) if slot not in (skip or {}).get(rank, set())]
        stored = handle.backend.batch_set_v1([keys[s] for s in slots], _slots(slots))
        check_equal(stored, [True] * len(slots), f"TP{tp_size} rank {rank} storing its shards", rule=RULE)


def _slots(slots: list[int]) -> torch.Tensor:
    indices = [page_indices(slot, 1) for slot in slots]
    return torch.cat(indices) if indices else torch.empty(0, dtype=torch.int64)


def _read(group: list[Handle], kv: torch.Tensor, keys: list[str], expected: list[list[bool]], what: str) -> None:
    """Each rank reads ``keys`` into slots 8.. and must hit exactly ``expected[rank]``, with its heads' bytes."""
    tp_size = len(group)
    for rank, handle in enumerate(group):
        name = f"{what}: TP{tp_size} rank {rank}"
        found = handle.backend.batch_get_v1(keys, page_indices(8, len(keys)))
        due = _allowed(handle, found, expected[rank])
        check_equal(list(found), due, f"{name} reading (per-page hits)", rule=RULE)
        exists = handle.backend.batch_exists_each(keys)
        check_equal(exists, _allowed(handle, exists, expected[rank]), f"{name}: exists per page", rule=RULE)
        for slot, hit in enumerate(found):
            if hit:
                got = rank_heads(handle.pool, 8 + slot).view(torch.uint8).numpy().tobytes()
                want = expected_heads(kv, slot, rank, tp_size).contiguous().view(torch.uint8).numpy().tobytes()
                check_equal(got == want, True, f"{name}: bytes of page {slot} equal its heads", rule=RULE)


def _allowed(handle: Handle, got: list[bool], expected: list[bool]) -> list[bool]:
    """``expected``, where a backend that ``may_evict`` may miss a page due (a hit is never allowed for a miss)."""
    if not handle.harness.caps.may_evict:
        return expected
    return [bool(hit) and due for hit, due in zip(got, expected, strict=True)]


def _shared_or_skip(harness: Harness, writer: Handle, key: str) -> None:
    twin = harness.open(writer.spec, config=writer.config)
    if not twin.backend.batch_exists_each([key])[0]:
        harness.skip_unshared()


class CrossTpTests:
    """Head shards: TP2, TP4 and TP1 deployments of one model share pages through ``tp_lcm_size``."""

    category = "cross_tp"

    @pytest.mark.parametrize("reader", LAYOUTS)
    @pytest.mark.parametrize("writer", ["page_head", "page_first"])
    def test_cross_tp_tp2_pages_read_by_tp4_and_tp1(self, harness: Harness, writer: str, reader: str) -> None:
        """TP2-written pages are hits with exact bytes, head by head, for TP4 and TP1 readers on every layout."""
        harness.require_sdk("head shards (tp_lcm_size)")
        kv, keys = global_kv(3, heads=HEADS), harness.keys(3)
        writers = _group(harness, 2, writer)
        _write(writers, kv, keys)
        _shared_or_skip(harness, writers[0], keys[0])
        _read(_group(harness, 4, reader), kv, keys, [[True] * 3] * 4, f"TP2 {writer} pages")
        _read(_group(harness, 1, reader), kv, keys, [[True] * 3], f"TP2 {writer} pages")

    @pytest.mark.parametrize("layout", ["page_head", "layer_first"])
    def test_cross_tp_tp4_and_tp1_pages_read_by_tp2(self, harness: Harness, layout: str) -> None:
        """The reverse: pages TP4 and TP1 deployments wrote are exact hits for TP2 readers."""
        harness.require_sdk("head shards (tp_lcm_size)")
        kv = global_kv(2, heads=HEADS, seed=5)
        for tp_size in (4, 1):
            keys = harness.keys(2)
            writers = _group(harness, tp_size, layout)
            _write(writers, kv, keys)
            _shared_or_skip(harness, writers[0], keys[0])
            _read(_group(harness, 2, "page_first"), kv, keys, [[True] * 2] * 2, f"TP{tp_size} {layout} pages")

    def test_cross_tp_missing_shard_is_a_miss(self, harness: Harness) -> None:
        """A page one of whose shards was never stored is a miss for every reader needing that shard, never a
        half-filled hit; readers whose shards are all there still hit."""
        harness.require_sdk("head shards (tp_lcm_size)")
        kv, keys = global_kv(3, heads=HEADS, seed=7), harness.keys(3)
        writers = _group(harness, 4, "page_first")
        _write(writers, kv, keys, skip={3: {1}})  # TP4 rank 3 (shard 3) never stores page 1
        _shared_or_skip(harness, writers[0], keys[0])
        what = "pages with shard 3 of page 1 missing"
        _read(_group(harness, 2, "page_head"), kv, keys, [[True] * 3, [True, False, True]], what)
        _read(_group(harness, 1, "page_first"), kv, keys, [[True, False, True]], what)

    def test_cross_tp_another_lcm_never_shares(self, harness: Harness) -> None:
        """A deployment with another tp_lcm_size (or none) reads none of these shards."""
        harness.require_sdk("head shards (tp_lcm_size)")
        kv, keys = global_kv(2, heads=HEADS, seed=9), harness.keys(2)
        writers = _group(harness, 2, "page_head")
        _write(writers, kv, keys)
        _shared_or_skip(harness, writers[0], keys[0])
        _read(_group(harness, 2, "page_head", lcm=8), kv, keys, [[False] * 2] * 2, "tp_lcm_size=8 readers")
        _read(_group(harness, 4, "page_head", lcm=8), kv, keys, [[False] * 2] * 4, "tp_lcm_size=8 readers")
        _read(_group(harness, 2, "page_head", lcm=None), kv, keys, [[False] * 2] * 2, "readers without tp_lcm_size")
