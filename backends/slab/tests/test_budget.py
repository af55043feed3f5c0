"""``capacity_bytes`` is the whole store's budget on disk, whoever uses the path.

Two models, a hybrid model's three pools (KV and two sidecar pools of other page sizes, written
through the v2 calls), every key space's manifest, and a health probe all use one small path and
write several times its capacity between them. After every round the files below the path take no
more disk than ``capacity_bytes`` (``st_blocks``, what preallocation reserved included), and every
page read back is a miss or exactly the bytes written under its key. Once all have closed, the
store's files are all that is left, and nothing once the store is empty.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hicache_storage_slab import SlabBackend
from slab_support import MIB, STORE_FILES, disk_bytes, names

from hicache_storage import HiCacheStorage, HostStatePool, PoolTransfer, make_config
from hicache_storage import testing as kit
from hicache_storage.cli.health import probe

CAPACITY = 16 * MIB
ROUNDS = 36
BATCH = 16  # pages per pool per round: written from slots [0, 16), read into [16, 32)


def image(pool: Any, page: int) -> bytes:
    return bytes(pool.get_data_page(page * int(pool.page_size), flat=True).view(torch.uint8).numpy())


def slots(pool: Any, pages: range) -> torch.Tensor:
    size = int(pool.page_size)
    return torch.tensor([p * size + t for p in pages for t in range(size)], dtype=torch.int64)


def refill(pool: Any, seed: int) -> None:
    """New random bytes in every slot of ``pool`` (each round writes other bytes)."""
    buffers = [pool.kv_buffer] if not isinstance(pool, HostStatePool) else [pool.temporal_buffer, *pool.conv_buffer]
    rng = np.random.default_rng(seed)
    for tensor in buffers:
        raw = tensor.view(-1).view(torch.uint8)
        raw.copy_(torch.frombuffer(bytearray(rng.bytes(raw.numel())), dtype=torch.uint8))


@dataclass
class Writer:
    """One deployment on the path: its pools (``kv`` first), and what each acknowledged."""

    storage: HiCacheStorage
    pools: dict[str, Any]
    written: dict[str, dict[str, bytes]] = field(default_factory=dict)
    bytes_written: int = 0

    def write_round(self, number: int, rng: random.Random) -> None:
        for name, pool in self.pools.items():
            refill(pool, rng.randrange(1 << 30))
            keys = kit.random_keys(BATCH)
            if name == "kv":
                done = self.storage.batch_set_v1(keys, slots(pool, range(BATCH)))
            else:
                transfer = PoolTransfer(name=name, host_indices=slots(pool, range(BATCH)), keys=keys)
                done = self.storage.batch_set_v2([transfer])[name]
            acknowledged = self.written.setdefault(name, {})
            for page, (key, ok) in enumerate(zip(keys, done, strict=True)):
                if ok:
                    acknowledged[key] = image(pool, page)
                    self.bytes_written += len(acknowledged[key])

    def check_reads(self, rng: random.Random) -> int:
        """Read a sample of every pool's keys (and two never written); how many hits, all exact."""
        hits = 0
        for name, pool in self.pools.items():
            known = list(self.written.get(name, {}))
            keys = rng.sample(known, min(BATCH - 2, len(known))) + kit.random_keys(2)
            target = slots(pool, range(BATCH, BATCH + len(keys)))
            if name == "kv":
                found = self.storage.batch_get_v1(keys, target)
            else:
                found = self.storage.batch_get_v2([PoolTransfer(name=name, host_indices=target, keys=keys)])[name]
            for page, (key, hit) in enumerate(zip(keys, found, strict=True)):
                if hit:
                    assert key in self.written[name], f"{name}: a key never written was read"
                    assert image(pool, BATCH + page) == self.written[name][key], f"{name}: wrong bytes for {key}"
                    hits += 1
        return hits


def open_storage(root: Path, model: str, **extra: Any) -> HiCacheStorage:
    options = {"path": str(root), "capacity_bytes": CAPACITY, "resilience": False, **extra}
    return HiCacheStorage(SlabBackend, make_config(model, extra_config=options))


def open_writer(root: Path, model: str, pools: dict[str, Any]) -> Writer:
    storage = open_storage(root, model)
    storage.register_mem_pool_host(pools["kv"])
    for name, pool in pools.items():
        if name != "kv":
            storage.register_mem_host_pool_v2(pool, name)
    if len(pools) > 1:
        storage.on_host_pools_registered()
    return Writer(storage, pools)


def health_probe(root: Path) -> None:
    """What ``hicache-storage health slab`` does: a page of its own size written, read back, removed."""
    storage = open_storage(root, "health", manifests=False)
    result = probe(storage)
    storage.close()
    assert result.healthy, result.error


def check_disk(root: Path, when: str) -> None:
    used = disk_bytes(root)
    assert used <= CAPACITY, f"{when}: {used} bytes of disk below the path, capacity_bytes is {CAPACITY}"
    assert set(names(root)) <= set(STORE_FILES), f"{when}: {names(root)}"


def test_every_user_of_one_path_stays_within_capacity_bytes(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    rng = random.Random(7)
    writers = [
        open_writer(root, "model-a", {"kv": kit.make_pool(num_pages=32, layer_num=8, head_num=4, head_dim=128)}),
        open_writer(
            root, "model-b", {"kv": kit.make_pool("layer_first", num_pages=32, layer_num=4, head_num=2, head_dim=256)}
        ),
        open_writer(
            root,
            "hybrid",
            {
                "kv": kit.make_pool(is_mla=True, num_pages=32, layer_num=4, kv_cache_dim=512),
                "swa": kit.make_pool(num_pages=32, layer_num=1, head_num=2, head_dim=128),
                "mamba": HostStatePool(num_slots=32, layer_num=4, temporal_shape=(8, 64), conv_shapes=((4, 64),)),
            },
        ),
    ]
    sizes = {len(image(pool, 0)) for writer in writers for pool in writer.pools.values()}
    assert len(sizes) == 5  # five page sizes, besides the manifests' and the probe's
    check_disk(root, "created")
    hits = 0
    for number in range(ROUNDS):
        for writer in writers:
            writer.write_round(number, rng)
        if number % 6 == 0:
            health_probe(root)
        check_disk(root, f"round {number}")
        hits += sum(writer.check_reads(rng) for writer in writers)
    total = sum(writer.bytes_written for writer in writers)
    assert total > 4 * CAPACITY, total
    evicted = sum(writer.storage.stats.get("evictions") for writer in writers)
    assert evicted > 0 and hits > 0
    faults = [writer.storage.get_stats()["faults"] for writer in writers]
    assert faults == [0, 0, 0]
    for writer in writers:
        writer.storage.close()
    check_disk(root, "closed")
    assert names(root) == STORE_FILES  # the store is kept (it holds pages), nothing else
    cleaner = open_storage(root, "cleaner")
    cleaner.register_mem_pool_host(kit.make_pool())
    cleaner.clear(everything=True)
    cleaner.close()
    assert names(root) == [] and disk_bytes(root) == 0  # an empty store is removed with its last user
