"""Listing, purging by storage key and manifests: what the operator commands rely on, from the index."""

from __future__ import annotations

from pathlib import Path

from hicache_storage_slab.records import key_digest
from slab_support import STORE_FILES, indices, make_backend, make_pool, names, storage_keys, the_store

from hicache_storage import testing as kit
from hicache_storage.store_admin import iter_pages


def test_any_instance_lists_every_page_of_the_store(tmp_path: Path) -> None:
    writer = make_backend(tmp_path / "store")
    keys = kit.random_keys(7)
    assert writer.batch_set_v1(keys, indices(0, 7)) == [True] * 7
    stored = storage_keys(writer, keys)
    elsewhere = make_backend(tmp_path / "elsewhere")  # another path: another store
    lister = make_backend(tmp_path / "store", make_pool(layout="layer_first"))  # another key space
    first = lister.list_pages(limit=3)
    assert len(first.pages) == 3 and first.cursor == key_digest(first.pages[-1].key.encode()).hex()
    listed = list(iter_pages(lister, batch=3))
    assert sorted(p.key for p in listed) == sorted(stored) and len(listed) == 7  # each once
    digests = [key_digest(p.key.encode()) for p in listed]
    assert digests == sorted(digests)  # in index order
    assert {p.nbytes for p in listed} == {the_store(writer).plan(768).stored_bytes}  # the slots it takes
    assert all(p.modified is not None and p.modified > 0 for p in listed)
    assert list(iter_pages(lister, writer.pool_keyspace().prefix)) == listed
    assert lister.list_pages("hc1-0000000000ffffffffff.").pages == []  # a key space with no page
    assert list(iter_pages(elsewhere)) == []
    for storage in (writer, elsewhere, lister):
        storage.clear(everything=True)
        storage.close()


def test_a_listing_goes_on_past_pages_removed_meanwhile(tmp_path: Path) -> None:
    storage = make_backend(tmp_path)
    keys = kit.random_keys(6)
    assert storage.batch_set_v1(keys, indices(0, 6)) == [True] * 6
    first = storage.list_pages(limit=2)
    rest = [p.key for p in storage.list_pages(limit=10).pages[2:]]
    assert storage.delete_stored([first.pages[-1].key, rest[0]]) == [True, True]
    more = storage.list_pages(cursor=first.cursor, limit=10)
    assert [p.key for p in more.pages] == rest[1:] and more.cursor is None
    storage.clear()
    storage.close()


def test_purge_by_storage_key_reaches_every_key_space_of_the_store(tmp_path: Path) -> None:
    writer = make_backend(tmp_path / "store")
    keys = kit.random_keys(4)
    assert writer.batch_set_v1(keys, indices(0, 4)) == [True] * 4
    stored = storage_keys(writer, keys)
    other = make_backend(tmp_path / "other")
    assert other.delete_stored(stored[:2]) == [True, True]  # another store: nothing to do
    assert writer.batch_exists_each(keys) == [True] * 4
    admin = make_backend(tmp_path / "store", make_pool(layout="layer_first"))  # another key space, same store
    assert admin.delete_stored(stored[:3]) == [True] * 3
    assert writer.batch_exists_each(keys) == [False, False, False, True]
    assert [p.key for p in admin.list_pages().pages] == [stored[3]]
    for storage in (writer, other, admin):
        storage.clear(everything=True)
        storage.close()
    assert names(tmp_path / "store") == [] and names(tmp_path / "other") == []


def test_a_manifest_is_a_page_of_its_own_size_in_the_same_store(tmp_path: Path) -> None:
    storage = make_backend(tmp_path, manifests=True)
    keys = kit.random_keys(2)
    assert storage.batch_set_v1(keys, indices(0, 2)) == [True] * 2
    listed = [p for p in iter_pages(storage) if p.is_manifest]
    assert len(listed) == 1
    manifest = storage.read_manifest(listed[0].key)
    assert manifest is not None and manifest.prefix == storage.pool_keyspace().prefix
    chunk_sizes = {entry.chunk_bytes for _digest, entry in the_store(storage).opened.index.entries(None)}
    assert chunk_sizes == {4096, 1024}  # the records' and the pages' slots
    assert names(tmp_path) == STORE_FILES  # one store
    storage.clear()
    storage.close()
    assert names(tmp_path) == []
