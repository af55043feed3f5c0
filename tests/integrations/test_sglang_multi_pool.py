"""Hybrid models against the released SGLang 0.5.23: sidecar pools through the adapter, call for call
as through SGLang's own ``HiCacheFile`` (opt-in: ``scripts/sglang-test.sh``).

What is SGLang's own code here:

- the storage calls are made by SGLang's controller methods (``HybridCacheController._storage_hit_query``,
  ``_sync_prefetch_hit_query``, ``_page_transfer`` with ``_page_transfer_sidecar`` and the base
  ``CacheController._page_transfer_kv_batch``, ``_page_backup`` with ``_sync_trailing_keys`` ...),
  compiled from the released wheel's source files onto a minimal stand-in ``self``
  (``sglang_controllers.py``: importing those modules needs the whole GPU server);
- page hashes come from SGLang's ``get_storage_hash_str``; transfers and results are SGLang's
  ``PoolTransfer``, ``PoolTransferResult``, ``PoolName`` and ``PoolHitPolicy``;
- backends are built by SGLang's ``StorageBackendFactory``: ``dynamic`` (this adapter over the SDK's
  ``file``, ``sim`` and ``redis`` backends) and ``file`` (SGLang's ``HiCacheFile``).

The host pools are the SDK test kit's (``make_hybrid_pools``: KV, SWA window KV, a DSA-style indexer,
Mamba state slots): SGLang's ``MHATokenToKVPoolHost``/``MambaPoolHost`` cannot be built here (their
package imports the model configs, hence ``transformers``, and they allocate from a device pool).
The kit's pools offer the same methods (``get_page_buffer_meta``, ``get_data_page``,
``get_dummy_flat_data_page``, ``set_from_flat_data_page``). The slots a request's pages occupy
are chosen by hand where SGLang's radix cache would allocate them.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from engine_configs import engine_fields

from hicache_storage.integrations.sglang import SGLangBackend, extra_config_for, sglang_available
from hicache_storage.testing import TestServices, make_hybrid_pools, page_bytes

sys.path.insert(0, str(Path(__file__).parent))

NO_SGLANG = "sglang is not importable; run scripts/sglang-test.sh (installs sglang==0.5.23, no dependencies)"
if os.environ.get("HICACHE_SGLANG_REQUIRED") and not sglang_available():
    raise RuntimeError("HICACHE_SGLANG_REQUIRED is set, but SGLang's HiCacheStorage cannot be imported")
pytestmark = [pytest.mark.sglang, pytest.mark.skipif(not sglang_available(), reason=NO_SGLANG)]

PAGE = 4
BACKENDS = ["file", "sim", "redis"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sg() -> SimpleNamespace:
    """SGLang's names used here."""
    import sglang_controllers
    from sglang.srt.mem_cache import hicache_storage as storage
    from sglang.srt.mem_cache.storage import StorageBackendFactory
    from sglang.srt.mem_cache.utils import get_storage_hash_str

    return SimpleNamespace(
        PoolName=storage.PoolName,
        PoolHitPolicy=storage.PoolHitPolicy,
        PoolTransfer=storage.PoolTransfer,
        PoolTransferResult=storage.PoolTransferResult,
        HiCacheStorageConfig=storage.HiCacheStorageConfig,
        HiCacheFile=storage.HiCacheFile,
        ExtraInfo=storage.HiCacheStorageExtraInfo,
        factory=StorageBackendFactory,
        hashes=get_storage_hash_str,
        controllers=sglang_controllers.load_controllers(),
        make_controller=sglang_controllers.make_controller,
        drain=sglang_controllers.drain,
    )


@pytest.fixture(scope="module")
def redis_url() -> str:
    services = TestServices(ROOT)
    services.control("start", "redis")  # idempotent: a running server is left as it is
    return services.settings()["HICACHE_TEST_REDIS_URL"]


def engine_config(sg: SimpleNamespace, extra: dict[str, Any]) -> Any:
    return sg.HiCacheStorageConfig(**engine_fields(extra, model_name="org/hybrid-model"))


@dataclass
class Side:
    """One storage backend as SGLang runs it: its controller, host pools and what each call returned."""

    label: str
    controller: Any
    backend: Any
    pools: dict[Any, Any]
    log: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def sides(
    request: pytest.FixtureRequest, sg: SimpleNamespace, tmp_path: Path
) -> Iterator[Callable[[str], tuple[Side, Side]]]:
    """``sides(backend)`` -> (SGLang's HiCacheFile, the adapter over SDK ``backend``), each with its own pools."""
    opened: list[Any] = []

    def build(name: str) -> tuple[Side, Side]:
        theirs_config = engine_config(sg, {"file_storage_path": str(tmp_path / "sglang-file")})
        ours_options: dict[str, Any] = {}
        if name == "file":
            ours_options = {"path": str(tmp_path / "sdk-file")}
        elif name == "redis":
            ours_options = {"url": request.getfixturevalue("redis_url"), "key_prefix": f"t{secrets.token_hex(4)}:"}
        ours_config = engine_config(sg, extra_config_for(name, **ours_options))
        result = []
        for label, kind, config in (("HiCacheFile", "file", theirs_config), (name, "dynamic", ours_config)):
            kit = make_hybrid_pools(num_pages=16, page_size=PAGE, seed=7)
            pools = {sg.PoolName(key): pool for key, pool in kit.items()}
            backend = sg.factory.create_backend(kind, config, pools[sg.PoolName.KV])
            opened.append(backend)
            controller = sg.make_controller(sg.controllers, backend, kind, pools, config)
            result.append(Side(label, controller, backend, pools))
        theirs, ours = result
        assert isinstance(theirs.backend, sg.HiCacheFile) and isinstance(ours.backend, SGLangBackend)
        return theirs, ours

    yield build
    for backend in opened:
        if isinstance(backend, SGLangBackend):
            backend.clear()
            backend.close()


# --------------------------------------------------------------------------- what SGLang's radix cache would do
def chain(sg: SimpleNamespace, tokens: list[int], parent_hash: str | None) -> list[str]:
    hashes: list[str] = sg.hashes(tokens, parent_hash, page_size=PAGE)
    return hashes


def backup_node(side: Side, node_pages: range, hashes: list[str], extra_pools: list[Any], tokens: list[int]) -> Any:
    """SGLang's write-through of one node: ``write_storage`` queues it, the backup thread runs ``_page_backup``."""
    ctrl = side.controller
    kv_slots = torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE) for p in node_pages])
    ctrl.write_storage(
        kv_slots,
        tokens[node_pages.start * PAGE : node_pages.stop * PAGE],
        hash_value=hashes[node_pages.start : node_pages.stop],
        extra_pools=extra_pools,
    )
    operation = ctrl.backup_queue.get_nowait()
    ctrl._page_backup(operation)
    return operation


def query(sg: SimpleNamespace, side: Side, tokens: list[int], transfers: list[Any]) -> Any:
    """SGLang's prefetch thread: the hit query, then the rank-reduced hit, as ``prefetch_thread_func`` does."""
    ctrl = side.controller
    operation = sg.controllers.PrefetchOperation(SimpleNamespace(rid="req"), tokens, None, None, transfers)
    hashes, hit_tokens = ctrl._storage_hit_query(operation)
    hit_tokens = ctrl._sync_prefetch_hit_query(operation, hit_tokens)
    operation.hash_value = hashes[: hit_tokens // PAGE]
    operation.storage_hit_count = hit_tokens
    return operation


def load(sg: SimpleNamespace, side: Side, operation: Any) -> dict[str, Any]:
    """Host slots for the hit (as the radix cache allocates them), then SGLang's ``_page_transfer``."""
    ctrl = side.controller
    kv_pool = side.pools[sg.PoolName.KV]
    pages = len(operation.hash_value)
    operation.host_indices = kv_pool.alloc(pages * PAGE)
    for transfer in operation.pool_transfers or []:
        if transfer.indices_from_pool is None:
            pool = side.pools[transfer.name]
            count = min(len(transfer.keys or [None]), pages)
            transfer.host_indices = pool.alloc(count * pool.page_size)
    # zero every destination page, so a page that is not loaded cannot read as loaded
    for name, pool in side.pools.items():
        slots = operation.host_indices if name in (sg.PoolName.KV, sg.PoolName.INDEXER) else None
        for transfer in operation.pool_transfers or []:
            if transfer.name == name and transfer.indices_from_pool is None:
                slots = transfer.host_indices
        for start in slots.tolist()[:: pool.page_size] if slots is not None else []:
            pool.set_from_flat_data_page(start, torch.zeros_like(pool.get_dummy_flat_data_page()))
    ctrl._page_transfer(operation)
    acks = sg.drain(ctrl.prefetch_sync_queue)
    return {
        "completed_tokens": [ack.completed_tokens for ack in acks if ack.completed_tokens is not None],
        "pool_hits": [ack.pool_hits for ack in acks if ack.pool_hits is not None],
    }


def slot_pages(pool: Any, slots: torch.Tensor) -> list[bytes]:
    return [page_bytes(pool, start // pool.page_size) for start in slots.tolist()[:: pool.page_size]]


def summary(result: Any) -> tuple[int, dict[Any, int], list[int] | None, list[str]]:
    """The fields of a ``PoolTransferResult``, and the types of its pool keys.

    A ``str``-mixin enum member compares and hashes like its value, so ``{"kv": 5} == {PoolName.KV: 5}``:
    the key types are listed to show that the answer is keyed by SGLang's own ``PoolName`` members.
    """
    hits = dict(result.extra_pool_hit_pages)
    return result.kv_hit_pages, hits, result.restorable_prefix_pages, sorted({type(key).__qualname__ for key in hits})


def exists_v2(sg: SimpleNamespace, side: Side, hashes: list[str], transfers: list[Any]) -> Any:
    result = side.backend.batch_exists_v2(hashes, transfers, sg.ExtraInfo(prefix_keys=None))
    assert isinstance(result, sg.PoolTransferResult)
    return result


# --------------------------------------------------------------------------- SWA hybrid
@pytest.mark.parametrize("backend", BACKENDS)
def test_swa_window_at_node_ends(sg: SimpleNamespace, sides: Callable[[str], tuple[Side, Side]], backend: str) -> None:
    """KV with ``batch_set_v1``/``batch_set``, the SWA window (2 pages) of each node with ``batch_set_v2``.

    Two nodes of 3 pages: the window is stored at pages 1-2 and 4-5, so the prefixes of 3 and 6
    pages are restorable and 4 and 5 are not.
    """
    tokens = list(range(100, 100 + 6 * PAGE))
    hashes = chain(sg, tokens[: 3 * PAGE], None)
    hashes += chain(sg, tokens[3 * PAGE :], hashes[-1])
    swa = sg.PoolName.SWA
    trailing = sg.PoolHitPolicy.TRAILING_PAGES
    outcome = {}
    for side in sides(backend):
        ctrl = side.controller
        side.pools[sg.PoolName.KV].alloc(6 * PAGE)  # the request's own KV pages: slots 0-5
        side.pools[swa].alloc(6 * PAGE)
        written = []
        for node in (range(0, 3), range(3, 6)):
            window = range(node.stop - 2, node.stop)
            transfer = sg.PoolTransfer(
                name=swa,
                host_indices=torch.arange(window.start * PAGE, window.stop * PAGE),
                keys=hashes[window.start : window.stop],
                hit_policy=trailing,
            )
            operation = backup_node(side, node, hashes, [transfer], tokens)
            written.append((operation.completed_tokens, dict(operation.pool_storage_result.extra_pool_hit_pages)))
        placeholders = [sg.PoolTransfer(name=swa, keys=["__placeholder__"] * 2, hit_policy=trailing)]
        full = exists_v2(sg, side, hashes, placeholders)
        short = exists_v2(sg, side, hashes[:5], placeholders)
        prefetch = [sg.PoolTransfer(name=swa, keys=["__placeholder__"] * 2, hit_policy=trailing)]
        operation = query(sg, side, tokens, prefetch)
        queried = (operation.storage_hit_count, dict(operation.query_pool_hit_pages))
        loaded = load(sg, side, operation)
        swa_slots = operation.pool_transfers[0].host_indices
        outcome[side.label] = {
            "written": written,
            "full": summary(full),
            "short": summary(short),
            "queried": queried,
            "loaded": loaded,
            "keys": list(operation.pool_transfers[0].keys),
            "kv_bytes_ok": slot_pages(side.pools[sg.PoolName.KV], operation.host_indices)
            == [page_bytes(side.pools[sg.PoolName.KV], p) for p in range(6)],
            "swa_bytes_ok": slot_pages(side.pools[swa], swa_slots) == [page_bytes(side.pools[swa], p) for p in (4, 5)],
        }
        ctrl.storage_backend.clear()
    theirs, ours = outcome["HiCacheFile"], outcome[backend]
    assert ours == theirs
    assert ours["written"] == [(3 * PAGE, {swa: 2}), (3 * PAGE, {swa: 2})]
    assert ours["full"] == (6, {sg.PoolName.KV: 6, swa: 6}, [3, 6], ["PoolName"])
    assert ours["short"] == (3, {sg.PoolName.KV: 5, swa: 3}, [3], ["PoolName"])
    assert ours["queried"] == (6 * PAGE, {sg.PoolName.KV: 6, swa: 6})
    assert ours["loaded"] == {"completed_tokens": [6 * PAGE], "pool_hits": [{swa: 2}]}
    assert ours["keys"] == hashes[4:6]
    assert ours["kv_bytes_ok"] and ours["swa_bytes_ok"]


# --------------------------------------------------------------------------- KV-derived sidecar (DSA indexer)
@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_derived_indexer_loads_with_kv(
    sg: SimpleNamespace, sides: Callable[[str], tuple[Side, Side]], backend: str
) -> None:
    """A DSA-style indexer at KV's own slots (``indices_from_pool=KV``, ``ALL_PAGES``).

    Written by ``_page_backup`` (the indexer transfer resolves KV's slots and keys), read by
    ``_page_transfer_kv_batch`` together with KV: 3 of 3 pages. A second node of 2 pages stored
    without its indexer cuts the hit at 3 pages.
    """
    tokens = list(range(7, 7 + 5 * PAGE))
    hashes = chain(sg, tokens[: 3 * PAGE], None)
    hashes += chain(sg, tokens[3 * PAGE :], hashes[-1])
    indexer, kv = sg.PoolName.INDEXER, sg.PoolName.KV
    everything = sg.PoolHitPolicy.ALL_PAGES
    outcome = {}
    for side in sides(backend):
        side.pools[kv].alloc(5 * PAGE)
        with_indexer = [sg.PoolTransfer(name=indexer, hit_policy=everything, indices_from_pool=kv)]
        first = backup_node(side, range(0, 3), hashes, with_indexer, tokens)
        second = backup_node(side, range(3, 5), hashes, [], tokens)
        transfers = [sg.PoolTransfer(name=indexer, hit_policy=everything, indices_from_pool=kv)]
        found = exists_v2(sg, side, hashes, transfers)
        prefetch = [sg.PoolTransfer(name=indexer, hit_policy=everything, indices_from_pool=kv)]
        operation = query(sg, side, tokens, prefetch)
        loaded = load(sg, side, operation)
        slots = operation.host_indices
        outcome[side.label] = {
            "written": [
                (first.completed_tokens, dict(first.pool_storage_result.extra_pool_hit_pages)),
                second.completed_tokens,
            ],
            "exists": summary(found),
            "queried": (operation.storage_hit_count, dict(operation.query_pool_hit_pages)),
            "loaded": loaded,
            "kv_bytes_ok": slot_pages(side.pools[kv], slots) == [page_bytes(side.pools[kv], p) for p in range(3)],
            "indexer_bytes_ok": slot_pages(side.pools[indexer], slots)
            == [page_bytes(side.pools[indexer], p) for p in range(3)],
        }
        side.backend.clear()
    theirs, ours = outcome["HiCacheFile"], outcome[backend]
    assert ours == theirs
    assert ours["written"] == [(3 * PAGE, {indexer: 3}), 2 * PAGE]
    assert ours["exists"] == (3, {kv: 5, indexer: 3}, [1, 2, 3], ["PoolName"])
    assert ours["queried"] == (3 * PAGE, {kv: 5, indexer: 3})
    assert ours["loaded"] == {"completed_tokens": [3 * PAGE], "pool_hits": [{}]}  # 3/3 through _page_transfer_kv_batch
    assert ours["kv_bytes_ok"] and ours["indexer_bytes_ok"]


# --------------------------------------------------------------------------- Mamba state at node boundaries
@pytest.mark.parametrize("backend", BACKENDS)
def test_mamba_state_at_node_boundaries(
    sg: SimpleNamespace, sides: Callable[[str], tuple[Side, Side]], backend: str
) -> None:
    """One Mamba state slot per node (``TRAILING_PAGES``, window 1), keyed by the node's last page hash.

    Nodes of 2, 3 and 2 pages; the middle node's KV is stored but its state is not, so the
    restorable prefixes are 2 and 7 (a hole at 5). The load brings the state of the 7-page boundary.
    """
    tokens = list(range(3000, 3000 + 7 * PAGE))
    nodes = (range(0, 2), range(2, 5), range(5, 7))
    hashes: list[str] = []
    for node in nodes:
        hashes += chain(sg, tokens[node.start * PAGE : node.stop * PAGE], hashes[-1] if hashes else None)
    mamba, kv = sg.PoolName.MAMBA, sg.PoolName.KV
    trailing = sg.PoolHitPolicy.TRAILING_PAGES
    outcome = {}
    for side in sides(backend):
        side.pools[kv].alloc(7 * PAGE)
        state = side.pools[mamba]
        state_slots = state.alloc(3)  # one checkpoint per node
        written = []
        for number, node in enumerate(nodes):
            slot, boundary = state_slots[number : number + 1], hashes[node.stop - 1]
            extra = [sg.PoolTransfer(name=mamba, host_indices=slot, keys=[boundary], hit_policy=trailing)]
            if number == 1:
                extra = []  # the middle node's state is not stored
            operation = backup_node(side, node, hashes, extra, tokens)
            written.append((operation.completed_tokens, dict(operation.pool_storage_result.extra_pool_hit_pages)))
        placeholder = [sg.PoolTransfer(name=mamba, keys=["__placeholder__"], hit_policy=trailing)]
        found = exists_v2(sg, side, hashes, placeholder)
        middle = exists_v2(sg, side, hashes[:6], placeholder)
        prefetch = [sg.PoolTransfer(name=mamba, keys=["__placeholder__"], hit_policy=trailing)]
        operation = query(sg, side, tokens, prefetch)
        loaded = load(sg, side, operation)
        loaded_slot = operation.pool_transfers[0].host_indices
        outcome[side.label] = {
            "written": written,
            "exists": summary(found),
            "middle": summary(middle),
            "queried": (operation.storage_hit_count, dict(operation.query_pool_hit_pages)),
            "loaded": loaded,
            "keys": list(operation.pool_transfers[0].keys),
            "state_ok": slot_pages(state, loaded_slot) == [page_bytes(state, int(state_slots[2]))],
            "kv_ok": slot_pages(side.pools[kv], operation.host_indices)
            == [page_bytes(side.pools[kv], p) for p in range(7)],
        }
        side.backend.clear()
    theirs, ours = outcome["HiCacheFile"], outcome[backend]
    assert ours == theirs
    assert ours["written"] == [(2 * PAGE, {mamba: 1}), (3 * PAGE, {}), (2 * PAGE, {mamba: 1})]
    assert ours["exists"] == (7, {kv: 7, mamba: 7}, [2, 7], ["PoolName"])
    assert ours["middle"] == (2, {kv: 6, mamba: 2}, [2], ["PoolName"])
    assert ours["queried"] == (7 * PAGE, {kv: 7, mamba: 7})
    assert ours["loaded"] == {"completed_tokens": [7 * PAGE], "pool_hits": [{mamba: 1}]}
    assert ours["keys"] == [hashes[6]]
    assert ours["state_ok"] and ours["kv_ok"]
