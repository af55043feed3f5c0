"""Support code for the pipeline tests: pools, the sim backend, a scripted backend, page contents, a clock."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import torch

from hicache_storage import HiCacheStorage, load_backend, make_config, page_hashes
from hicache_storage.pipeline import BufferOnlyPipeline, DeviceKVPool, PipelineConfig, Span
from hicache_storage.plugin import Backend, BackendSetup, BatchContext, PageBuffers
from hicache_storage.plugin.page_format import decode_into, encode_record

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
PAGE_SIZE = 4


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_device_pool(
    device: str = "cpu",
    num_pages: int = 16,
    layout: str = "page_first",
    is_mla: bool = False,
    page_size: int = PAGE_SIZE,
) -> DeviceKVPool:
    return DeviceKVPool(
        num_pages=num_pages,
        page_size=page_size,
        layer_num=2,
        head_num=2,
        head_dim=4,
        kv_cache_dim=8,
        dtype="bfloat16",
        layout=layout,
        is_mla=is_mla,
        device=device,
    )


def sim_backend(**options: Any) -> HiCacheStorage:
    extra = {"sim_op_latency_us": 0, "resilience": False, **options}
    return load_backend("sim", make_config("m", extra_config=extra))


def make_pipeline(
    device: str = "cpu",
    storage: HiCacheStorage | None = None,
    device_pages: int = 16,
    layout: str = "page_first",
    is_mla: bool = False,
    **options: Any,
) -> BufferOnlyPipeline:
    options.setdefault("record_decisions", True)
    pool = make_device_pool(device, device_pages, layout, is_mla)
    return BufferOnlyPipeline(PipelineConfig(**options), pool, storage or sim_backend(), clock=FakeClock())


def chain(pages: int, seed: int = 0, prior: str | None = None) -> list[str]:
    """Page hashes of a synthetic prompt."""
    tokens = [(seed * 7919 + i) % 50000 for i in range(pages * PAGE_SIZE)]
    return page_hashes(tokens, PAGE_SIZE, prior_hash=prior)


def pattern(page_hash: str, nbytes: int) -> torch.Tensor:
    """Bytes derived from a page hash (what the page must hold wherever it goes)."""
    seed = hashlib.sha256(page_hash.encode()).digest()
    reps = -(-nbytes // len(seed))
    return torch.frombuffer(bytearray(seed * reps), dtype=torch.uint8)[:nbytes]


def _page_bytes(pool: DeviceKVPool, page: int) -> torch.Tensor:
    return pool.pages[:, page].contiguous().view(torch.uint8).reshape(-1).cpu()


def fill(pool: DeviceKVPool, device_tokens: torch.Tensor, hashes: Sequence[str]) -> None:
    for start, page_hash in zip(device_tokens[:: pool.page_size].tolist(), hashes, strict=True):
        page = start // pool.page_size
        view = pool.pages[:, page]
        data = pattern(page_hash, view.numel() * view.element_size()).to(pool.device)
        view.copy_(data.view(view.dtype).view(view.shape))


def assert_holds(pool: DeviceKVPool, device_tokens: torch.Tensor, hashes: Sequence[str]) -> None:
    starts = device_tokens[:: pool.page_size].tolist()
    assert len(starts) == len(hashes)
    for start, page_hash in zip(starts, hashes, strict=True):
        got = _page_bytes(pool, start // pool.page_size)
        assert torch.equal(got, pattern(page_hash, got.numel())), f"page {page_hash[:12]} differs"


def make_span(
    pipeline: BufferOnlyPipeline, span_id: int | str, hashes: Sequence[str], parent: str | None = None, **kw: Any
) -> Span:
    """Allocate device slots for ``hashes``, fill them with their pattern, and describe the span."""
    pool = pipeline.device_pool
    tokens = pool.alloc(len(hashes) * pool.page_size, owner=("engine", span_id))
    assert tokens is not None
    fill(pool, tokens, hashes)
    return Span(span_id, list(hashes), tokens, parent_hash=parent, **kw)


class ScriptedBackend(Backend):
    """Dict-backed backend whose per-key outcomes a test controls (matched on the bare hash)."""

    def __init__(self, setup: BackendSetup[Any]) -> None:
        self.records: dict[str, bytes] = {}
        self.fail_write: set[str] = set()
        self.fail_read: set[str] = set()
        self.hidden: set[str] = set()
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    @staticmethod
    def _bare(key: str) -> str:
        return key.split(".")[1]

    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        self.calls.append(("write", len(keys)))
        out = []
        for key, page in zip(keys, pages, strict=True):
            ok = self._bare(key) not in self.fail_write
            if ok:
                self.records[key] = encode_record(page)
            out.append(ok)
        return out

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        self.calls.append(("read", len(keys)))
        return [
            key in self.records and self._bare(key) not in self.fail_read and decode_into(self.records[key], page)
            for key, page in zip(keys, pages, strict=True)
        ]

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        self.calls.append(("exists", len(keys)))
        return [key in self.records and self._bare(key) not in self.hidden for key in keys]

    def stored_bare(self) -> set[str]:
        return {self._bare(key) for key in self.records}


S = TypeVar("S", bound=ScriptedBackend)


def scripted(cls: type[S] = ScriptedBackend) -> tuple[HiCacheStorage, S]:  # type: ignore[assignment]
    """Storage over a fresh ``cls`` (resilience off), and the backend itself (to script its outcomes)."""
    storage = load_backend(cls, make_config("m", extra_config={"resilience": False}))
    backend = storage.backend
    assert isinstance(backend, cls)
    return storage, backend


class CallerWrapper:
    """Forwards every attribute to ``storage``; subclasses override caller methods to misbehave as a caller
    API (not a backend) would: raise from a batch call, answer garbage."""

    def __init__(self, storage: HiCacheStorage) -> None:
        self.storage = storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)
