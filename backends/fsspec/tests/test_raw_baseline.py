"""The raw baseline the fsspec backend offers to ``hicache-storage bench`` (memory://, a local directory, s3fs)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hicache_storage_fsspec import FsspecBackend
from hicache_storage_fsspec.raw_baseline import RawFsspec

from hicache_storage import make_config
from hicache_storage.cli.bench import run_bench
from hicache_storage.plugin import raw_baseline_for
from hicache_storage.testing import check_raw_client

pytestmark = pytest.mark.timeout(60)


def files_under(raw: RawFsspec, folder: str) -> list[str]:
    raw.fs.invalidate_cache()
    try:
        return sorted(path.rsplit("/", 1)[-1] for path in raw.fs.find(folder))
    except FileNotFoundError:
        return []


def test_round_trip_exists_and_close(location: dict[str, Any]) -> None:
    raw = raw_baseline_for(FsspecBackend, make_config(extra_config={**location, "concurrency": 4}))
    assert isinstance(raw, RawFsspec)
    try:
        keys, _data = check_raw_client(raw)
        assert raw.folder.endswith("/raw-baseline")
        assert files_under(raw, raw.folder) == sorted(keys)
    finally:
        raw.close()
    assert files_under(raw, raw.folder) == []
    assert not raw.fs.exists(raw.folder)


@pytest.mark.parametrize("kind", ["memory", "s3"])
def test_bench_reports_ratios_against_fsspec(kind: str, request: pytest.FixtureRequest) -> None:
    if kind == "memory":
        options: dict[str, Any] = {"url": f"memory://hicache-{secrets.token_hex(4)}"}
    else:
        from fsspec_support import s3_storage_options

        bucket = request.getfixturevalue("bucket")
        storage = s3_storage_options(request.getfixturevalue("env"))
        options = {"url": f"s3://{bucket}/{secrets.token_hex(4)}", "storage_options": storage}
    result = run_bench("fsspec", options, page_bytes=8192, pages=16, batch=8)
    assert result["byte_exact"]
    assert result["raw"] is not None
    assert result["raw"]["get"]["ok"] == 16
    assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
    print("fsspec", kind, result["ratio_ours_over_raw"])
    raw = raw_baseline_for(FsspecBackend, make_config(extra_config=options))
    assert isinstance(raw, RawFsspec)
    root = raw.folder.rsplit("/", 1)[0]
    assert not raw.fs.exists(raw.folder)
    assert files_under(raw, root) == []  # bench cleared the backend's pages too
