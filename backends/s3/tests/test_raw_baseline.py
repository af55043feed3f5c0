"""The raw baseline the s3 backend offers to ``hicache-storage bench``, against a real S3 server (moto)."""

from __future__ import annotations

import os
import secrets
from typing import Any

import numpy as np
import pytest
from hicache_storage_s3 import S3Backend
from hicache_storage_s3.raw_baseline import RawS3
from s3_support import s3_client, s3_options

from hicache_storage import make_config
from hicache_storage.bench import run_bench

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def options(env: dict[str, str], bucket: str) -> dict[str, Any]:
    return {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}", "max_workers": 4}


def pages(count: int, size: int) -> list[memoryview]:
    return [memoryview(bytearray(os.urandom(size))) for _ in range(count)]


def listed(env: dict[str, str], bucket: str, prefix: str) -> list[str]:
    response = s3_client(env).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in response.get("Contents", ()))


def test_round_trip_exists_and_close(env: dict[str, str], bucket: str, options: dict[str, Any]) -> None:
    raw = S3Backend.raw_baseline(make_config(extra_config=options))
    assert isinstance(raw, RawS3)
    keys = [secrets.token_hex(8) for _ in range(5)]
    data = [*pages(4, 4096), np.arange(2048, dtype=np.uint16).reshape(2, 1024).data]  # not flat bytes: cast
    try:
        assert raw.set(keys, data) == [True] * 5
        assert raw.exists([*keys, "absent"]) == [True] * 5 + [False]
        out = [*pages(5, 4096), memoryview(bytearray(10))]
        assert raw.get([*keys, "absent"], out) == [True] * 5 + [False]
        assert [bytes(view) for view in out[:5]] == [bytes(view) for view in data]
        assert raw.get(keys[:1], [memoryview(bytearray(100))]) == [False]  # wrong size: a miss
        expected = sorted(f"{options['prefix']}/raw-baseline/{key}" for key in keys)
        assert listed(env, bucket, options["prefix"] + "/") == expected
    finally:
        raw.close()
    assert listed(env, bucket, options["prefix"] + "/") == []


def test_bench_reports_ratios_against_boto3(env: dict[str, str], bucket: str, options: dict[str, Any]) -> None:
    result = run_bench("s3", options, page_bytes=8192, pages=16, batch=8)
    assert result["byte_exact"]
    assert result["raw"] is not None
    assert result["raw"]["get"]["ok"] == 16
    assert all(result["ratio_ours_over_raw"][op] > 0 for op in ("set", "exists", "get"))
    print("s3", result["ratio_ours_over_raw"])
    left = listed(env, bucket, options["prefix"] + "/")
    assert left and not [name for name in left if "/raw-baseline/" in name]  # only the backend's pages remain
    s3_client(env).delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": name} for name in left]})
