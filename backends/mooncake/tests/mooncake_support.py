"""Helpers of the mooncake backend tests: the test master through scripts/services, client options,
and clients of a private master (the fault tests').

Pools, page indices, page bytes and keys are the test kit's (:mod:`hicache_storage.testing`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from typing import Any

from hicache_storage_mooncake import MooncakeBackend
from hicache_storage_mooncake.conformance import MooncakeHooks
from hicache_storage_mooncake.raw_store import MooncakeRawStore

from hicache_storage import HiCacheStorage, HostKVPool, make_config
from hicache_storage import testing as kit
from hicache_storage.testing import outage
from hicache_storage.testing.fixtures import checkout_services
from hicache_storage.testing.ports import HOST

__all__ = [
    "PAGE_SIZE",
    "SERVICES",
    "client_options",
    "ctl",
    "ensure_running",
    "indices",
    "keys_for",
    "make_pool",
    "open_mooncake",
    "open_on_ports",
    "page_bytes",
    "raw_store",
    "settings",
    "store_options",
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


def store_options(master: str, metadata: str, **extra: Any) -> dict[str, Any]:
    """Options for a client of the master at ``master``: no segment of its own, fast set-up (a client
    with no master answering otherwise retries for about 90 s), a fresh key prefix."""
    return {
        "master_server_address": master,
        "metadata_server": metadata,
        "global_segment_size": 0,
        "local_buffer_size": 16 << 20,
        "setup_retries": 1,
        "key_prefix": f"t{secrets.token_hex(4)}/",
        **extra,
    }


def client_options(**extra: Any) -> dict[str, Any]:
    """Options for a client of the checkout's test master (HTTP metadata)."""
    env = settings()
    return store_options(env["HICACHE_TEST_MOONCAKE_MASTER"], env["HICACHE_TEST_MOONCAKE_METADATA"], **extra)


def raw_store(storage: HiCacheStorage) -> MooncakeRawStore:
    """The stored objects of ``storage``'s mooncake backend by storage key (the conformance hooks' side channel)."""
    backend = storage.backend
    assert isinstance(backend, MooncakeBackend)
    return MooncakeHooks().raw_store(backend)


def open_on_ports(ports: Sequence[int], key_prefix: str, **extra: Any) -> HiCacheStorage:
    """A client of the private master on ``ports`` (rpc, http metadata, ...), with the outage kit's pool
    registered (``storage.mem_pool_host``); its objects under ``key_prefix``."""
    master, metadata = f"{HOST}:{ports[0]}", f"http://{HOST}:{ports[1]}/metadata"
    options = store_options(master, metadata, key_prefix=key_prefix, **extra)
    storage = HiCacheStorage(MooncakeBackend, make_config("rel-model", extra_config=options))
    storage.register_mem_pool_host(outage.make_pool())
    return storage


def open_mooncake(services: outage.PrivateServices, tag: str, **extra: Any) -> HiCacheStorage:
    """A client of ``services``' private master (started if it is not), its keys under a fresh ``<tag><hex>/``."""
    services.ctl("start", "mooncake")
    return open_on_ports(services.mooncake_ports, f"{tag}{secrets.token_hex(3)}/", **extra)
