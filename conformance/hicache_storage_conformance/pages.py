"""Host pools for the suite and page contents derived from (key, version), so any mix is detectable.

Every page the suite writes starts with a 16-byte stamp (XXH3-64 of the key, then the version) and
continues with bytes drawn from a generator seeded by both. A page read back can therefore be
checked on its own: its stamp says which (key, version) it claims to be, and regenerating that page
shows whether every other byte agrees.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import numpy as np
import torch
import xxhash

from hicache_storage import HostKVPool

__all__ = [
    "PoolSpec",
    "host_indices",
    "key_hash",
    "make_pool",
    "page_content",
    "read_slot",
    "stamp_of",
    "tensor_bytes",
    "tensor_of",
    "verify_page",
    "write_slot",
]

_STAMP = struct.Struct("<QQ")


@dataclass(frozen=True)
class PoolSpec:
    """Geometry of a small host pool (MHA uses ``head_num``/``head_dim``; MLA ``kv_cache_dim``)."""

    layout: str = "page_first"
    dtype: str = "bfloat16"
    is_mla: bool = False
    page_size: int = 4
    layer_num: int = 2
    head_num: int = 2
    head_dim: int = 8
    kv_cache_dim: int = 16
    num_pages: int = 64

    def with_(self, **changes: object) -> PoolSpec:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        """Short description for test ids and messages."""
        return f"{'MLA' if self.is_mla else 'MHA'}-{self.layout}-{self.dtype}-p{self.page_size}"


def make_pool(spec: PoolSpec) -> HostKVPool:
    """A zero-filled :class:`HostKVPool` of ``spec`` (never pinned: the suite runs on CPUs)."""
    return HostKVPool(**asdict(spec), pin_memory=False)


def key_hash(key: str) -> int:
    """The key hash a page's stamp starts with."""
    return xxhash.xxh3_64_intdigest(key.encode())


@lru_cache(maxsize=4096)
def page_content(key: str, version: int, nbytes: int) -> bytes:
    """The page the suite stores under ``key`` at ``version`` (deterministic, ``nbytes`` long)."""
    seed = xxhash.xxh3_64_intdigest(f"{key}#{version}#{nbytes}".encode())
    body = bytearray(np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes())
    stamp = _STAMP.pack(key_hash(key), version)
    body[: min(nbytes, len(stamp))] = stamp[: min(nbytes, len(stamp))]
    return bytes(body)


def stamp_of(data: bytes) -> tuple[int, int]:
    """(key hash, version) a page claims to be."""
    return _STAMP.unpack_from(data) if len(data) >= _STAMP.size else (0, 0)


def verify_page(key: str, data: bytes, versions: Sequence[int] | None = None) -> str | None:
    """``None`` if ``data`` is exactly a page of ``key`` (at one of ``versions`` if given), else why not."""
    stamped, version = stamp_of(data)
    if stamped != key_hash(key):
        return f"page read for key {key[:16]}... carries another key's stamp (or no stamp)"
    if versions is not None and version not in versions:
        return f"page read for key {key[:16]}... is version {version}, expected one of {sorted(versions)}"
    if data != page_content(key, version, len(data)):
        return f"page read for key {key[:16]}... mixes bytes of different writes (stamp says version {version})"
    return None


def host_indices(pool: HostKVPool, slots: Sequence[int]) -> torch.Tensor:
    """Token indices of the page slots ``slots`` (what the v1 calls take)."""
    size = pool.page_size
    base = torch.tensor(list(slots), dtype=torch.int64)[:, None] * size
    return (base + torch.arange(size, dtype=torch.int64)).reshape(-1)


def write_slot(pool: HostKVPool, slot: int, data: bytes) -> None:
    """Copy ``data`` (one page) into page slot ``slot`` of ``pool``."""
    offset = 0
    for segment in pool.page_segments(slot * pool.page_size):
        segment[:] = data[offset : offset + segment.nbytes]
        offset += segment.nbytes


def read_slot(pool: HostKVPool, slot: int) -> bytes:
    """The bytes of page slot ``slot`` of ``pool``."""
    return b"".join(bytes(segment) for segment in pool.page_segments(slot * pool.page_size))


def tensor_of(pool: HostKVPool, data: bytes) -> torch.Tensor:
    """A flat tensor of the pool's dtype holding ``data`` (a v0 page value)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(pool.dtype)


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """Raw bytes of a tensor returned by a v0 read."""
    return bytes(tensor.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
