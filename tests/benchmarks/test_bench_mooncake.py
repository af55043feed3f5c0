"""benchmarks/bench_mooncake.py completes at its default batches on the test services' store.

The test services mount a 256 MB segment: the benchmark must fit what it writes into it (it used
to keep every variant's batch of 128 x 512 KiB pages at once, and stopped with "staged_set failed"),
and a store that other objects fill must not stop it (a failed attempt is retried once the store
has evicted some).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_support import run_json, services_env

pytestmark = [pytest.mark.timeout(300), pytest.mark.services]

os.environ.setdefault("MC_LOG_LEVEL", "WARNING")


def test_bench_mooncake_completes_at_batch_128(tmp_path: Path) -> None:
    env = services_env("mooncake")
    result = run_json("bench_mooncake.py", "--repeat", "1", out=tmp_path / "result.json", env=env, timeout_s=280)
    assert set(result["batches"]) == {"32", "128"}
    for row in result["batches"].values():
        assert row["failed_attempts"] >= 0
        for variant in ("ours", "nohash", "staged"):
            for op in ("set", "get"):
                assert row[f"{variant}_{op}_ratio"] > 0 and row[f"{variant}_{op}_vs_rawsess"] > 0
                assert row[f"{variant}_{op}_vs_rawhdr"] > 0
        assert row["rawhdr_set_ratio"] > 0 and row["rawhdr_get_ratio"] > 0


def test_bench_mooncake_completes_on_a_nearly_full_store(tmp_path: Path) -> None:
    """Other objects fill 200 of the 256 MB: a batch of 128 x 512 KiB pages finds no room until the
    master evicts some, and the benchmark retries instead of stopping."""
    env = services_env("mooncake")
    store = _raw_client(env)
    prefix = f"benchfill{secrets.token_hex(3)}/"
    filler = np.zeros(1 << 20, dtype=np.uint8)
    try:
        assert store.register_buffer(filler.ctypes.data, filler.nbytes) == 0
        names = [f"{prefix}{n}" for n in range(200)]
        codes = store.batch_put_from(names, [filler.ctypes.data] * 200, [filler.nbytes] * 200, _replicate())
        assert sum(code == 0 for code in codes) >= 150, codes
        out = tmp_path / "result.json"
        result = run_json("bench_mooncake.py", "--repeat", "1", "--batches", "128", out=out, env=env, timeout_s=280)
        assert set(result["batches"]) == {"128"}
        assert result["batches"]["128"]["failed_attempts"] >= 0
    finally:
        store.remove_by_regex("^" + prefix, True)
        store.unregister_buffer(filler.ctypes.data)
        store.close()


def _raw_client(env: dict[str, str]) -> Any:
    """A ``MooncakeDistributedStore`` of the test master that lends no memory."""
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    code = store.setup(
        "127.0.0.1",
        env["HICACHE_TEST_MOONCAKE_METADATA"],
        0,
        16 << 20,
        "tcp",
        "",
        env["HICACHE_TEST_MOONCAKE_MASTER"],
    )
    assert code == 0, f"Mooncake set-up failed with code {code}"
    return store


def _replicate() -> Any:
    from mooncake.store import ReplicateConfig

    config = ReplicateConfig()
    config.replica_num = 1
    return config
