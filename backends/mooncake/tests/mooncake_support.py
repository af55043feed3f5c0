"""Helpers of the mooncake backend tests: the test master through scripts/services, pools and keys."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

import torch

from hicache_storage import HostKVPool

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = REPO / "scripts" / "services"
PAGE_SIZE = 4

os.environ.setdefault("MC_LOG_LEVEL", "WARNING")


def make_pool(layout: str = "page_first", is_mla: bool = False, num_pages: int = 16) -> HostKVPool:
    pool = HostKVPool(
        num_pages=num_pages,
        page_size=PAGE_SIZE,
        layer_num=3,
        layout=layout,
        is_mla=is_mla,
        head_num=2,
        head_dim=8,
        kv_cache_dim=24,
    )
    raw = pool.kv_buffer.view(-1).view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(3)))
    return pool


def indices(first_page: int, count: int) -> torch.Tensor:
    return torch.arange(first_page * PAGE_SIZE, (first_page + count) * PAGE_SIZE, dtype=torch.int64)


def page_bytes(pool: HostKVPool, page: int) -> bytes:
    return bytes(pool.get_data_page(page * PAGE_SIZE).view(torch.uint8).numpy())


def keys_for(count: int) -> list[str]:
    salt = secrets.token_hex(4)
    return [hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(count)]


def settings() -> dict[str, str]:
    """The HICACHE_TEST_* connection settings (the environment overrides env.sh's defaults)."""
    out = subprocess.run(
        ["bash", str(SCRIPTS / "env.sh"), "--json"], capture_output=True, text=True, check=True, timeout=30
    )
    return dict(json.loads(out.stdout))


def ctl(action: str, *names: str) -> None:
    """``scripts/services/ctl.sh ACTION NAME...``; raises with the script's output on failure."""
    done = subprocess.run(
        ["bash", str(SCRIPTS / "ctl.sh"), action, *names],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )
    if done.returncode != 0:
        raise RuntimeError(f"ctl.sh {action} {' '.join(names)} failed:\n{done.stdout}\n{done.stderr}")


def ensure_running() -> None:
    """Master and segment holder up (a no-op when they already are)."""
    ctl("start", "mooncake")


def client_options(**extra: Any) -> dict[str, Any]:
    """Options for a client of the test master: HTTP metadata, no segment of its own, fast set-up."""
    env = settings()
    return {
        "master_server_address": env["HICACHE_TEST_MOONCAKE_MASTER"],
        "metadata_server": env["HICACHE_TEST_MOONCAKE_METADATA"],
        "global_segment_size": 0,
        "local_buffer_size": 16 << 20,
        "setup_retries": 1,
        "key_prefix": f"t{secrets.token_hex(4)}/",
        **extra,
    }
