"""The reliability tests' helpers: the test kit's outage tools, plus a Mooncake instance on private servers."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from hicache_storage import HiCacheStorage, make_config
from hicache_storage.testing.fault_figures import (
    FAULT_ROWS,
    FIGURES,
    fault_table,
    record,
    record_fault_row,
    write_summary,
)
from hicache_storage.testing.outage import (
    PAGE_SIZE,
    PrivateServices,
    TimedWorkload,
    Workload,
    assert_clean,
    fault_phase,
    fill_page,
    make_keys,
    make_pool,
    page_content,
    race_writers,
    read_page,
    round_trip_ok,
    scramble_pages,
    unit_pid,
)
from hicache_storage.testing.ports import HOST, free_ports, port_free

__all__ = [
    "FAULT_ROWS",
    "FIGURES",
    "HOST",
    "PAGE_SIZE",
    "REPO",
    "PrivateServices",
    "TimedWorkload",
    "Workload",
    "assert_clean",
    "fault_phase",
    "fault_table",
    "fill_page",
    "free_ports",
    "make_keys",
    "make_pool",
    "open_mooncake",
    "page_content",
    "port_free",
    "race_writers",
    "read_page",
    "record",
    "record_fault_row",
    "round_trip_ok",
    "scramble_pages",
    "unit_pid",
    "write_summary",
]

REPO = Path(__file__).resolve().parents[2]


def open_mooncake(services: PrivateServices, tag: str, **extra: Any) -> HiCacheStorage:
    """A Mooncake backend on the private master (started), its keys under a fresh ``<tag><hex>/`` prefix."""
    from hicache_storage_mooncake import MooncakeBackend

    services.ctl("start", "mooncake")
    rpc, http = services.mooncake_ports[0], services.mooncake_ports[1]
    options = {
        "master_server_address": f"{HOST}:{rpc}",
        "metadata_server": f"http://{HOST}:{http}/metadata",
        "global_segment_size": 0,
        "local_buffer_size": 16 << 20,
        "setup_retries": 1,
        "key_prefix": f"{tag}{secrets.token_hex(3)}/",
        **extra,
    }
    backend = HiCacheStorage(MooncakeBackend, make_config("m", extra_config=options))
    backend.register_mem_pool_host(make_pool())
    return backend
