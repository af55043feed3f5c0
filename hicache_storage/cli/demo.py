"""The main job on an embedded default: pages through the host pool into storage and back, verified.

Writes ``pages`` pages of random content through ``batch_set_v1`` from a :class:`HostKVPool`, wipes
the pool, reads them back with ``batch_get_v1`` and compares every byte. No server is needed: the
default backends are ``file`` (a temporary directory) and ``sim`` (in memory).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import make_config
from ..host_pool import HostKVPool
from ..keys import page_hashes
from ..registry import load_backend

__all__ = ["DemoResult", "cleanup", "default_demo_backends", "run_demo"]


@dataclass
class DemoResult:
    """Outcome of one backend's round trip."""

    backend: str
    pages: int
    page_bytes: int
    stored: int
    read_back: int
    exact: int
    write_seconds: float
    read_seconds: float

    @property
    def ok(self) -> bool:
        return self.stored == self.read_back == self.exact == self.pages

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def _page_content(seed: int, nbytes: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)


def _fill(pool: HostKVPool, start: int, seed: int) -> None:
    offset = 0
    content = _page_content(seed, pool.bytes_per_page)
    for segment in pool.page_segments(start):
        np.frombuffer(segment, dtype=np.uint8)[:] = content[offset : offset + segment.nbytes]
        offset += segment.nbytes


def _matches(pool: HostKVPool, start: int, seed: int) -> bool:
    content = _page_content(seed, pool.bytes_per_page)
    offset = 0
    for segment in pool.page_segments(start):
        if not np.array_equal(np.frombuffer(segment, dtype=np.uint8), content[offset : offset + segment.nbytes]):
            return False
        offset += segment.nbytes
    return True


def run_demo(
    backend: str,
    extra_config: dict[str, Any] | None = None,
    *,
    pages: int = 2048,
    batch: int = 128,
    progress: Any = None,
) -> DemoResult:
    """Round-trip ``pages`` pages through ``backend`` and verify every byte.

    ``progress`` (optional) is called with the number of pages just processed.
    """
    pool = HostKVPool(
        num_pages=batch, page_size=16, layer_num=4, head_num=4, head_dim=64, dtype="bfloat16", layout="page_first"
    )
    tokens = list(range(pages * pool.page_size))
    keys = page_hashes([t % 50_000 + 7 for t in tokens], pool.page_size, namespace="demo")
    config = make_config("demo-model", extra_config=extra_config)
    stored = read_back = exact = 0
    with load_backend(backend, config) as storage:
        storage.register_mem_pool_host(pool)
        write_seconds = 0.0
        for first in range(0, pages, batch):
            chunk = keys[first : first + batch]
            indices = pool.alloc(len(chunk) * pool.page_size)
            assert indices is not None
            starts = indices[:: pool.page_size].tolist()
            for number, start in enumerate(starts):
                _fill(pool, start, first + number)
            mark = time.perf_counter()
            stored += sum(storage.batch_set_v1(chunk, indices))
            write_seconds += time.perf_counter() - mark
            pool.free(indices)
            if progress:
                progress(len(chunk))
        pool.kv_buffer.zero_()
        read_seconds = 0.0
        for first in range(0, pages, batch):
            chunk = keys[first : first + batch]
            indices = pool.alloc(len(chunk) * pool.page_size)
            assert indices is not None
            mark = time.perf_counter()
            hits = storage.batch_get_v1(chunk, indices)
            read_seconds += time.perf_counter() - mark
            read_back += sum(hits)
            starts = indices[:: pool.page_size].tolist()
            exact += sum(hit and _matches(pool, start, first + n) for n, (hit, start) in enumerate(zip(hits, starts)))
            pool.kv_buffer.zero_()
            pool.free(indices)
            if progress:
                progress(len(chunk))
        if storage.capabilities.supports_clear:
            storage.clear()
    return DemoResult(backend, pages, pool.bytes_per_page, stored, read_back, exact, write_seconds, read_seconds)


def default_demo_backends(path: str | None) -> tuple[list[tuple[str, dict[str, Any]]], str | None]:
    """The embedded defaults: ``file`` in a temporary directory (or ``path``) and ``sim``."""
    owned = None
    if path is None:
        owned = tempfile.mkdtemp(prefix="hicache-demo-")
        path = owned
    return [("file", {"path": path}), ("sim", {})], owned


def cleanup(owned: str | None) -> None:
    """Remove a temporary directory created by :func:`default_demo_backends`."""
    if owned:
        shutil.rmtree(owned, ignore_errors=True)
