"""Helpers of the mooncake backend tests: the test master through scripts/services, and client options.

Pools, page indices, page bytes and keys are the test kit's (:mod:`hicache_storage.testing`).
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from hicache_storage import HostKVPool
from hicache_storage import testing as kit
from hicache_storage.testing.fixtures import checkout_services

__all__ = [
    "PAGE_SIZE",
    "SERVICES",
    "client_options",
    "ctl",
    "ensure_running",
    "indices",
    "keys_for",
    "make_pool",
    "page_bytes",
    "settings",
]

PAGE_SIZE = kit.PAGE_SIZE
SERVICES = checkout_services(__file__)
settings = SERVICES.settings
indices = kit.page_indices
page_bytes = kit.page_bytes
keys_for = kit.random_keys

os.environ.setdefault("MC_LOG_LEVEL", "WARNING")


def make_pool(layout: str = "page_first", is_mla: bool = False, num_pages: int = 16) -> HostKVPool:
    """The kit's seeded pool (4-token pages, 3 layers)."""
    return kit.make_pool(layout, is_mla, num_pages)


def ctl(action: str, *names: str) -> None:
    """``scripts/services/ctl.sh ACTION NAME...``; raises with the script's output on failure."""
    SERVICES.run(action, *names)


def ensure_running() -> None:
    """Master and segment holder up (a no-op when they already are)."""
    SERVICES.run("start", "mooncake")


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
