"""The raw baseline the file backend offers to ``hicache-storage bench``."""

import json
from pathlib import Path

from hicache_storage_file import FileBackend
from hicache_storage_file.raw_baseline import RawFiles

from hicache_storage import make_config
from hicache_storage.cli.commands import run
from hicache_storage.plugin import raw_baseline_for


def test_raw_files_round_trip_and_misses(tmp_path: Path) -> None:
    raw = RawFiles(tmp_path / "raw")
    page = [memoryview(bytearray(b"abc")), memoryview(bytearray(b"defg"))]
    assert raw.set(["k1"], [page]) == [True]
    assert raw.exists(["k1", "k2"]) == [True, False]
    out = [memoryview(bytearray(3)), memoryview(bytearray(4))]
    assert raw.get(["k1", "k2"], [out, memoryview(bytearray(7))]) == [True, False]
    assert bytes(out[0]) + bytes(out[1]) == b"abcdefg"
    raw.close()
    assert not (tmp_path / "raw").exists()


def test_hook_uses_a_subdirectory_of_the_configured_path(tmp_path: Path) -> None:
    raw = raw_baseline_for(FileBackend, make_config(extra_config={"path": str(tmp_path), "namespace": "x"}))
    assert isinstance(raw, RawFiles)
    assert raw.directory == tmp_path / "raw-baseline"


def test_bench_reports_a_ratio_against_raw_files(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    config = json.dumps({"path": str(tmp_path / "store")})
    args = [
        "bench",
        "file",
        "--config",
        config,
        "--page-bytes",
        "8192",
        "--pages",
        "32",
        "--batch",
        "8",
        "--json",
        str(out),
    ]
    assert run(args) == 0
    result = json.loads(out.read_text())
    assert result["byte_exact"]
    assert result["raw"]["get"]["ok"] == 32
    assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
    assert not (tmp_path / "store" / "raw-baseline").exists()
