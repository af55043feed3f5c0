"""SlotStore: the bytes in a page's slots by storage key, behind the backend's back (tools, the
conformance hooks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hicache_storage_slab import SlotStore
from slab_support import indices, make_backend, make_pool, page_bytes, slab_backend, storage_keys

from hicache_storage import testing as kit


def test_the_slots_of_a_key_read_written_and_removed(tmp_path: Path) -> None:
    pool = make_pool()
    storage = make_backend(tmp_path, pool)
    slots = SlotStore(slab_backend(storage))
    keys = kit.random_keys(2)
    first, second = storage_keys(storage, keys)
    assert slots.get(first) is None and first not in slots and 42 not in slots
    with pytest.raises(KeyError):
        slots[first] = b"x"  # nothing stored under it to overwrite
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True, True]
    assert slots[first] == page_bytes(pool, 0) and first in slots
    with pytest.raises(ValueError, match="holds 768 bytes"):
        slots[first] = b"x" * 769
    slots[first] = b"short"  # the rest zero-filled: the page fails its checks
    assert slots[first] == b"short" + bytes(763)
    assert storage.batch_get_v1(keys, indices(4, 2)) == [False, True]
    assert slots.pop(second) == page_bytes(pool, 1) and storage.batch_exists_each(keys[1:]) == [False]
    with pytest.raises(KeyError):
        del slots[second]
    with pytest.raises(KeyError):
        slots[second]
    storage.close()
