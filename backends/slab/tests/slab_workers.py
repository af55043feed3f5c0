"""Worker processes for ``test_multiprocess.py``, started by a fork server.

``python slab_workers.py`` imports everything once, prints ``ready``, then reads one JSON line per
worker from stdin (``{"mode": ..., "spec": ..., "out": path}``), forks it (a worker starts in
milliseconds, not in the seconds an interpreter takes to import torch) and prints its pid. A worker's
stdout and stderr go to the file ``out``, line by line; it runs in its own process, with its own
store handle, as another process on the host would.

- ``hammer``: prints ``ready``, waits for the file ``spec["go"]``, then writes and reads random stamped
  pages of a small key set for ``seconds``, checks every hit byte for byte, and prints a JSON report.
- ``writer``: writes stamped pages of its keys round after round, forever, printing
  ``<key index> <version>`` for every acknowledged write, until it is killed. With ``pause_after``, the
  write after that many acknowledgements stops halfway through its payload, prints ``mid`` and waits
  to be killed there.

The writer's pages (:func:`stamped_page`) are cheap to make, so a random kill lands in a write, not in
making its bytes: a per-key random body with ``(key hash, version)`` stamped at the start of every
4 KiB block. A page of another key, of two versions mixed, or torn, fails :func:`stamp_problem`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import struct
import sys
import time
import traceback
from functools import lru_cache
from typing import Any

import torch
from hicache_storage_conformance.pages import page_content, read_slot, verify_page, write_slot
from hicache_storage_slab import SlabBackend, store

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
    extra = {"path": path, "resilience": False, "manifests": False, "namespace": "mp", **options}
    backend = HiCacheStorage(SlabBackend, make_config("workers", extra_config=extra))
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
    give_up = time.monotonic() + 60
    while not os.path.exists(spec["go"]) and time.monotonic() < give_up:
        time.sleep(0.002)
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
            for slot, (key, hit) in enumerate(zip(batch, hits, strict=True)):
                if hit:
                    counts["hits"] += 1
                    problem = verify_page(key, read_slot(pool, 4 + slot))
                    if problem:
                        errors.append(problem)
    stats = backend.get_stats()
    backend.close()
    report = {**counts, "errors": errors, "counters": stats["counters"], "faults": stats["faults"]}
    print(json.dumps(report), flush=True)


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
    """From now on a write puts half its payload in its slot, says ``mid`` and waits to be killed."""

    def half(self: Any, file: Any, views: list[memoryview], offset: int, *_rest: Any) -> None:
        first = views[0].cast("B") if views[0].format != "B" else views[0]
        os.pwrite(file.fd, first[: first.nbytes // 2], offset)
        print("mid", flush=True)
        time.sleep(120)

    store.Store._write_chunk = half  # type: ignore[method-assign, assignment]


MODES = {"hammer": hammer, "writer": writer}


def _run_worker(mode: str, spec: dict[str, Any], out: str) -> None:
    """In the forked child: output to ``out``, run, and leave without returning to the server's loop."""
    code = 0
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        MODES[mode](spec)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The fork server's loop (see the module docstring); children are reaped by the kernel."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_worker(request["mode"], request["spec"], request["out"])
        print(pid, flush=True)


if __name__ == "__main__":
    serve()
