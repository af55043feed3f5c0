"""A short, bounded run of benchmarks/load_test.py on the backends that need no server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rel_support import REPO, record

pytestmark = pytest.mark.timeout(120)


def test_load_test_smoke(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "load_test.py"),
            "--backends",
            "file,sim",
            "--duration",
            "1",
            "--threads",
            "4",
            "--universe",
            "128",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(out.read_text())
    assert written["machine"]["cpus"] >= 1 and "hicache-storage" in written["machine"]["versions"]
    results = {row["backend"]: row for row in written["rows"]}
    assert set(results) == {"file", "sim"}
    for name, row in results.items():
        assert row["ops"] > 0 and row["hits"] > 0, row
        assert row["errors"] == 0 and row["wrong_pages"] == 0 and row["leaked_host_pages"] == 0, row
        assert row["hung_threads"] == 0 and row["p99_ms"] > 0, row
        assert row["rss_growth_mb"] < 64, row
        record(f"load_smoke.{name}.ops_per_s", row["ops_per_s"])
