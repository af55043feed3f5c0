"""Listing, purging by storage key, and removing emptied slabs: what the operator commands rely on."""

from __future__ import annotations

import os
from pathlib import Path

from hicache_storage_slab.layout import ENTRY_SIZE
from slab_support import indices, make_backend, make_pool, storage_keys

from hicache_storage import testing as kit
from hicache_storage.store_admin import iter_pages


def test_a_fresh_instance_lists_every_page_from_the_slot_headers(tmp_path: Path) -> None:
    writer = make_backend(tmp_path)
    keys = kit.random_keys(7)
    assert writer.batch_set_v1(keys, indices(0, 7)) == [True] * 7
    stored = storage_keys(writer, keys)
    page = writer.pool_keyspace().page_bytes
    reader = make_backend(tmp_path / "elsewhere")  # opens no slab of ``tmp_path``: lists from the files alone
    lister = make_backend(tmp_path)
    first = lister.list_pages(limit=3)
    assert len(first.pages) == 3 and first.cursor == first.pages[-1].key
    listed = list(iter_pages(lister, batch=3))
    assert [p.key for p in listed] == sorted(stored)  # key order, each once
    assert {p.nbytes for p in listed} == {page + ENTRY_SIZE}  # payload and slot header
    assert all(p.modified is not None and p.modified > 0 for p in listed)
    assert list(iter_pages(lister, writer.pool_keyspace().prefix)) == listed
    assert lister.list_pages("hc1-0000000000ffffffffff.").pages == []  # another key space: none
    for storage in (writer, reader, lister):
        storage.close()


def test_purge_by_storage_key_reaches_a_slab_the_instance_never_opened(tmp_path: Path) -> None:
    writer = make_backend(tmp_path)
    keys = kit.random_keys(4)
    assert writer.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    stored = storage_keys(writer, keys)
    other = make_backend(tmp_path / "other")
    assert other.delete_stored(stored[:2]) == [True, True]  # no slab of those keys there: nothing to do
    assert writer.batch_exists_each(keys) == [True] * 4
    admin = make_backend(tmp_path, make_pool(layout="layer_first"))  # another key space: its slab only
    assert admin.delete_stored(stored[:3]) == [True] * 3
    assert writer.batch_exists_each(keys) == [False, False, False, True]
    assert [p.key for p in admin.list_pages().pages] == [stored[3]]
    for storage in (writer, other, admin):
        storage.close()


def test_an_emptied_slab_is_removed_once_no_process_has_it_open(tmp_path: Path) -> None:
    first = make_backend(tmp_path)
    second = make_backend(tmp_path)  # the same slab, open twice (as two ranks would)
    keys = kit.random_keys(3)
    assert first.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert first.delete(keys) == [True] * 3
    first.close()
    assert any("slab-" in name for name in os.listdir(tmp_path))  # still open in ``second``
    second.close()
    assert os.listdir(tmp_path) == []  # files and lock file gone
    kept = make_backend(tmp_path)
    assert kept.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    kept.close()
    assert any("slab-" in name for name in os.listdir(tmp_path))  # a slab holding pages stays
    again = make_backend(tmp_path)
    assert again.batch_exists_each(keys) == [True] * 3
    again.clear()
    again.close()
    assert os.listdir(tmp_path) == []


def test_a_manifest_has_a_small_slab_of_its_own(tmp_path: Path) -> None:
    storage = make_backend(tmp_path, manifests=True)
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True] * 2
    listed = [p for p in iter_pages(storage) if p.is_manifest]
    assert len(listed) == 1
    manifest = storage.read_manifest(listed[0].key)
    assert manifest is not None and manifest.prefix == storage.pool_keyspace().prefix
    sizes = sorted(os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if "slab-" in n)
    assert len(sizes) == 2 and sizes[0] < 64 << 10  # the pages' slab and a small one of 4 KiB records
    storage.close()
