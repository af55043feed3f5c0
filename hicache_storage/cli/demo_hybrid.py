"""The main job for a hybrid model: KV, sliding-window KV and recurrent state through storage and back.

A hybrid model (Qwen3-Next style: full-attention KV plus Mamba/GDN state, with a sliding-window
pool as gpt-oss has) stores, for each node of ``node_pages`` pages: every KV page (``batch_set_v1``),
the sliding window's last ``window`` pages and one state slot at the node's end (``batch_set_v2``).
The demo wipes the host pools, asks ``batch_exists_v2`` which prefixes are restorable (exactly the
node boundaries), loads the longest one (KV, window and state) and compares every byte.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from ..config import make_config
from ..host_pool import HostKVPool
from ..keys import page_hashes
from ..pools import HostStatePool, PoolHitPolicy, PoolName, PoolTransfer
from ..registry import load_backend

__all__ = ["HybridDemoResult", "run_hybrid_demo"]


@dataclass
class HybridDemoResult:
    """Outcome of one backend's hybrid round trip."""

    backend: str
    kv_pages: int
    nodes: int
    restorable_expected: list[int]
    restorable_found: list[int]
    kv_exact: int
    window: int
    window_exact: int
    state_exact: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.restorable_found == self.restorable_expected
            and self.kv_exact == self.kv_pages
            and self.window_exact == self.window
            and self.state_exact
        )

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def _randomize(tensors: list[torch.Tensor], seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for tensor in tensors:
        raw = tensor.view(-1).view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=generator))


def _image(pool: Any, page: int) -> bytes:
    """Page ``page``'s flat bytes (the same for our pools and SGLang's)."""
    return bytes(pool.get_data_page(page * int(pool.page_size), flat=True).contiguous().view(torch.uint8).numpy())


def _slots(page_size: int, pages: list[int]) -> torch.Tensor:
    return torch.tensor([p * page_size + t for p in pages for t in range(page_size)], dtype=torch.int64)


def run_hybrid_demo(
    backend: str, extra_config: dict[str, Any] | None = None, *, nodes: int = 8, node_pages: int = 4, window: int = 2
) -> HybridDemoResult:
    """Store ``nodes`` nodes of a hybrid model through ``backend``, then restore the longest prefix and verify it."""
    begin = time.perf_counter()
    pages = nodes * node_pages
    kv = HostKVPool(num_pages=2 * pages, page_size=16, layer_num=2, head_num=4, head_dim=64, layout="page_first")
    swa = HostKVPool(num_pages=2 * pages, page_size=16, layer_num=1, head_num=4, head_dim=64, layout="page_first")
    state = HostStatePool(num_slots=2 * nodes, layer_num=2, temporal_shape=(4, 16), conv_shapes=((3, 16),))
    _randomize([kv.kv_buffer, swa.kv_buffer, state.temporal_buffer, *state.conv_buffer], seed=11)
    keys = page_hashes([(t * 7919) % 50_000 for t in range(pages * kv.page_size)], kv.page_size, namespace="demo")
    boundaries = [node_pages * (n + 1) for n in range(nodes)]
    window_pages = sorted({p for end in boundaries for p in range(end - window, end)})
    kv_written = [_image(kv, p) for p in range(pages)]
    swa_written = {p: _image(swa, p) for p in window_pages}
    state_written = [_image(state, n) for n in range(nodes)]
    kv_exact = window_exact = 0
    state_exact = False
    with load_backend(backend, make_config("demo-hybrid", extra_config=extra_config)) as storage:
        storage.register_mem_pool_host(kv)
        storage.register_mem_host_pool_v2(swa, PoolName.SWA)
        storage.register_mem_host_pool_v2(state, PoolName.MAMBA)
        storage.on_host_pools_registered()
        storage.batch_set_v1(keys, _slots(kv.page_size, list(range(pages))))
        storage.batch_set_v2(
            [
                PoolTransfer(PoolName.SWA, _slots(swa.page_size, window_pages), keys=[keys[p] for p in window_pages]),
                PoolTransfer(PoolName.MAMBA, torch.arange(nodes), keys=[keys[end - 1] for end in boundaries]),
            ]
        )
        for tensor in (kv.kv_buffer, swa.kv_buffer, state.temporal_buffer, *state.conv_buffer):
            tensor.zero_()
        query = [
            PoolTransfer(PoolName.MAMBA, keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES),
            PoolTransfer(PoolName.SWA, keys=keys[-window:], hit_policy=PoolHitPolicy.TRAILING_PAGES),
        ]
        found = storage.batch_exists_v2(keys, query)
        longest = found.kv_hit_pages
        if longest:
            loaded = list(range(pages, pages + longest))  # the second half of each pool
            hits = storage.batch_get_v1(keys[:longest], _slots(kv.page_size, loaded))
            kv_exact = sum(ok and _image(kv, pages + p) == kv_written[p] for p, ok in enumerate(hits))
            tail = list(range(longest - window, longest))
            got = storage.batch_get_v2(
                [
                    PoolTransfer(
                        PoolName.SWA, _slots(swa.page_size, [pages + p for p in tail]), keys=[keys[p] for p in tail]
                    ),
                    PoolTransfer(PoolName.MAMBA, torch.tensor([nodes]), keys=[keys[longest - 1]]),
                ]
            )
            window_exact = sum(
                ok and _image(swa, pages + p) == swa_written[p] for p, ok in zip(tail, got[PoolName.SWA], strict=True)
            )
            state_exact = (
                bool(got[PoolName.MAMBA][0]) and _image(state, nodes) == state_written[longest // node_pages - 1]
            )
        if storage.capabilities.supports_clear:
            storage.clear()
    return HybridDemoResult(
        backend,
        pages,
        nodes,
        boundaries,
        list(found.restorable_prefix_pages or []),
        kv_exact,
        window,
        window_exact,
        state_exact,
        time.perf_counter() - begin,
    )
