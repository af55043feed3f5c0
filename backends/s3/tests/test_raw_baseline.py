"""The raw baseline the s3 backend offers to ``hicache-storage bench``, against a real S3 server (moto)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from hicache_storage_s3 import S3Backend
from hicache_storage_s3.raw_baseline import RawS3
from s3_support import s3_client, s3_options

from hicache_storage import make_config
from hicache_storage.cli.bench import run_bench
from hicache_storage.plugin import raw_baseline_for
from hicache_storage.testing import check_raw_client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def options(env: dict[str, str], bucket: str) -> dict[str, Any]:
    return {**s3_options(env, bucket), "prefix": f"t{secrets.token_hex(4)}", "max_workers": 4}


def listed(env: dict[str, str], bucket: str, prefix: str) -> list[str]:
    response = s3_client(env).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in response.get("Contents", ()))


def test_round_trip_exists_and_close(env: dict[str, str], bucket: str, options: dict[str, Any]) -> None:
    raw = raw_baseline_for(S3Backend, make_config(extra_config=options))
    assert isinstance(raw, RawS3)
    try:
        keys, _data = check_raw_client(raw)
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
    assert listed(env, bucket, options["prefix"] + "/") == []  # neither the baseline's nor the backend's pages remain
