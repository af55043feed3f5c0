"""Makes ``slab_support`` importable for the slab backend's tests; the fixtures they share."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage_slab import index as index_module
from hicache_storage_slab import store as store_module
from hicache_storage_slab.index import SlabIndex, open_index
from slab_support import Clock, small_geometry


@pytest.fixture(autouse=True)
def _remove_what_the_test_left(tmp_path: Path) -> Iterator[None]:
    """Stores are preallocated: whatever a test leaves below its ``tmp_path`` is removed after it."""
    yield
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A :class:`~slab_support.Clock` in place of ``time`` in the store and index modules."""
    fake = Clock()
    for module in (store_module, index_module):
        monkeypatch.setattr(module, "time", fake)
    return fake


@pytest.fixture
def small_index(tmp_path: Path) -> Iterator[SlabIndex]:
    """An index on its own (no data files): 4 regions of 64 KiB, every region spare."""
    index = open_index(str(tmp_path / "slab.index"), small_geometry())
    index.reset(b"s" * 16)
    yield index
    index.close()


@pytest.fixture
def disk_dir() -> Iterator[Path]:
    """A directory on a disk file system (``/var/tmp``: ``/tmp`` may be a tmpfs, which refuses
    ``O_DIRECT``), removed after the test."""
    path = Path(tempfile.mkdtemp(prefix="slab-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
