"""The physical baseline of the slab's benchmarks: positional I/O into one preallocated file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hicache_storage_slab import SlabBackend
from hicache_storage_slab.raw_baseline import RawSlab

from hicache_storage import make_config
from hicache_storage import testing as kit
from hicache_storage.plugin import raw_baseline_for


def test_raw_baseline_client(tmp_path: Path) -> None:
    raw = RawSlab(tmp_path / "raw", reserve_bytes=1 << 20, threads=2)
    keys, expected = kit.check_raw_client(raw)
    out = [memoryview(bytearray(len(e))) for e in expected]
    assert raw.get(keys, out) == [True] * len(keys)
    assert [bytes(o) for o in out] == expected
    raw.drop_cache()
    raw.close()
    assert not (tmp_path / "raw").exists()
    baseline = raw_baseline_for(
        SlabBackend, make_config("m", extra_config={"path": str(tmp_path / "slab"), "io_threads": 3})
    )
    assert isinstance(baseline, RawSlab) and baseline.path.parent == tmp_path / "slab" / "raw-baseline"
    assert baseline.get(keys, out) == [False] * len(keys)  # nothing survives the process that wrote it
    baseline.close()


def test_the_raw_baseline_reads_without_readahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((fd, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    raw = RawSlab(tmp_path / "raw", reserve_bytes=1 << 20)
    assert (raw.fd, os.POSIX_FADV_RANDOM) in advised
    raw.close()
