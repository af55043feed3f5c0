"""Faults: a dead drive (the conformance hooks' outage), I/O errors, scribbled data files. Every one
degrades to misses and ``False``, counted, never to wrong bytes; the store serves again afterwards.

A disk too small for the store at creation is ``test_store_files.py``'s.
"""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab.conformance import SlabHooks
from slab_support import indices, make_backend, make_pool, page_bytes, slab_backend, the_store

from hicache_storage import testing as kit


def test_a_dead_drive_degrades_every_call_and_the_store_recovers(tmp_path: Path) -> None:
    storage = make_backend(tmp_path, resilience=kit.FAST_RESILIENCE)
    backend = slab_backend(storage)
    hooks = SlabHooks()
    kit.check_outage_and_recovery(storage, lambda: hooks.stop_server(backend), lambda: hooks.start_server(backend))
    assert storage.get_stats()["faults"] > 0
    storage.clear()
    storage.close()


@pytest.mark.parametrize("call", ["preadv", "pwritev"])
def test_io_errors_are_counted_faults_and_misses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    pool = make_pool()
    storage = make_backend(tmp_path, pool)
    keys = kit.random_keys(3)
    if call == "preadv":
        assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    real = getattr(os, call)
    data_fds = {file.fd for file in slab_backend(storage).data_files()}

    def failing(fd: int, *args: Any) -> Any:
        if fd in data_fds:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, *args)

    monkeypatch.setattr(os, call, failing)
    if call == "preadv":
        assert storage.batch_get_v1(keys, indices(4, 3)) == [False] * 3
    else:
        assert storage.batch_set_v1(keys, indices(0, 3)) == [False] * 3
    stats = storage.get_stats()
    assert stats["faults"] == 1 and "Input/output error" in (stats.get("last_fault") or "")
    assert the_store(storage).opened.index.claim_count() == 0
    monkeypatch.setattr(os, call, real)
    assert storage.batch_set_v1(keys, indices(0, 3)) == [True] * 3
    assert storage.batch_get_v1(keys, indices(4, 3)) == [True] * 3
    assert [page_bytes(pool, 4 + i) for i in range(3)] == [page_bytes(pool, i) for i in range(3)]
    storage.clear()
    storage.close()


def test_scribbled_data_files_never_read_as_data(tmp_path: Path) -> None:
    pool = make_pool(num_pages=48)
    storage = make_backend(tmp_path, pool)
    keys = kit.random_keys(24)
    assert storage.batch_set_v1(keys, indices(0, 24)) == [True] * 24
    (file,) = slab_backend(storage).data_files()
    used = 2 * the_store(storage).geometry.region_bytes  # the pages are in the first region or two
    rng = random.Random(5)
    for _ in range(600):
        os.pwrite(file.fd, rng.randbytes(rng.choice([1, 8, 64, 700])), rng.randrange(0, used - 700))
    hits = storage.batch_get_v1(keys, indices(24, 24))
    for i, hit in enumerate(hits):
        assert not hit or page_bytes(pool, 24 + i) == page_bytes(pool, i), f"page {i} read back wrong bytes"
    assert sum(hits) < 24, "the scribbles hit no stored page"
    assert storage.stats.get("integrity_failures") == 24 - sum(hits)  # every miss was a failed check
    assert storage.batch_set_v1(keys, indices(0, 24)) == [True] * 24  # and the damaged pages can be stored again
    assert storage.batch_get_v1(keys, indices(24, 24)) == [True] * 24
    storage.clear()
    storage.close()
