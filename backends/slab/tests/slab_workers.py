"""Worker processes for ``test_multiprocess.py`` (run as ``python slab_workers.py MODE JSON``).

- ``hammer``: prints ``ready``, waits for a line on stdin, then writes and reads random stamped pages
  of a small key set for ``seconds``, checks every hit byte for byte, and prints a JSON report.
- ``writer``: writes stamped pages of its keys round after round, forever, printing
  ``<key index> <version>`` for every acknowledged write (flushed at once), until it is killed.
  With ``pause_after``, the write after that many acknowledgements stops halfway through its
  payload, prints ``mid`` and waits to be killed there.

The writer's pages (:func:`stamped_page`) are cheap to make, so a random kill lands in a write, not
in making its bytes: a per-key random body with ``(key hash, version)`` stamped at the start of every
4 KiB block. A page of another key, of two versions mixed, or torn, fails :func:`stamp_problem`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import sys
import time
from functools import lru_cache
from typing import Any

from hicache_storage_conformance.pages import page_content, read_slot, verify_page, write_slot
from hicache_storage_slab import SlabBackend, slab

from hicache_storage import HiCacheStorage, HostKVPool, make_config
from hicache_storage import testing as kit

_STAMP = struct.Struct("<QQ")
_BLOCK = 4096


@lru_cache(maxsize=64)
def _body(key: str, size: int) -> bytes:
    return random.Random(key).randbytes(size)


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def stamped_page(key: str, version: int, size: int) -> bytes:
    """The writer's page for (``key``, ``version``)."""
    page = bytearray(_body(key, size))
    stamp = _STAMP.pack(_key_hash(key), version)
    for offset in range(0, size, _BLOCK):
        page[offset : offset + _STAMP.size] = stamp
    return bytes(page)


def stamp_problem(key: str, data: bytes) -> tuple[int, str | None]:
    """(version, ``None``) if ``data`` is exactly a page of ``key``, else (version, what is wrong)."""
    key_hash, version = _STAMP.unpack_from(data)
    if key_hash != _key_hash(key):
        return version, "another key's page (or no page)"
    if data != stamped_page(key, version, len(data)):
        return version, f"not exactly version {version}: a torn or mixed page"
    return version, None


def make_pool(layers: int) -> HostKVPool:
    """16 tokens x ``layers`` x 4 heads x 128 dims x bf16 x (K, V): 32 KiB per layer."""
    return HostKVPool(num_pages=8, page_size=16, layer_num=layers, head_num=4, head_dim=128, layout="page_first")


def open_backend(path: str, pool: HostKVPool, options: dict[str, Any]) -> HiCacheStorage:
    config = make_config("workers", extra_config={"path": path, "resilience": False, "namespace": "mp", **options})
    backend = HiCacheStorage(SlabBackend, config)
    backend.register_mem_pool_host(pool)
    return backend


def hammer(spec: dict[str, Any]) -> None:
    pool = make_pool(layers=spec["layers"])
    backend = open_backend(spec["path"], pool, spec["options"])
    keys: list[str] = spec["keys"]
    size = pool.bytes_per_page
    rng = random.Random(spec["worker"])
    counts = {"writes": 0, "written": 0, "reads": 0, "hits": 0}
    errors: list[str] = []
    version = spec["worker"] * 1_000_000
    print("ready", flush=True)
    sys.stdin.readline()
    stop_at = time.monotonic() + spec["seconds"]
    while time.monotonic() < stop_at and len(errors) < 5:
        batch = rng.sample(keys, 3)
        if rng.random() < 0.5:
            for slot, key in enumerate(batch):
                version += 1
                write_slot(pool, slot, page_content(key, version, size))
            counts["written"] += sum(backend.batch_set_v1(batch, kit.page_indices(0, 3, pool.page_size)))
            counts["writes"] += 3
        else:
            hits = backend.batch_get_v1(batch, kit.page_indices(4, 3, pool.page_size))
            counts["reads"] += 3
            for slot, (key, hit) in enumerate(zip(batch, hits)):
                if hit:
                    counts["hits"] += 1
                    problem = verify_page(key, read_slot(pool, 4 + slot))
                    if problem:
                        errors.append(problem)
    stats = backend.get_stats()
    backend.close()
    print(
        json.dumps({**counts, "errors": errors, "counters": stats["counters"], "faults": stats["faults"]}), flush=True
    )


def writer(spec: dict[str, Any]) -> None:
    pool = make_pool(layers=spec["layers"])
    backend = open_backend(spec["path"], pool, spec["options"])
    keys: list[str] = spec["keys"]
    size = pool.bytes_per_page
    version = spec["first_version"]
    pause_after = spec.get("pause_after")
    acknowledged = 0
    while True:
        version += 1
        for index, key in enumerate(keys):
            if acknowledged == pause_after:
                _stop_halfway()
            write_slot(pool, 0, stamped_page(key, version, size))
            if backend.batch_set_v1([key], kit.page_indices(0, 1, pool.page_size)) == [True]:
                acknowledged += 1
                print(index, version, flush=True)


def _stop_halfway() -> None:
    """From now on a write puts half its payload in the slot, says ``mid`` and waits to be killed."""

    def half(self: Any, file: Any, offset: int, page: Any, *_rest: Any) -> int:
        first = memoryview(page[0]).cast("B")
        os.pwrite(file.fd, first[: first.nbytes // 2], offset)
        print("mid", flush=True)
        time.sleep(120)
        return 0

    slab.Slab._write_payload = half  # type: ignore[method-assign]


if __name__ == "__main__":
    {"hammer": hammer, "writer": writer}[sys.argv[1]](json.loads(sys.argv[2]))
