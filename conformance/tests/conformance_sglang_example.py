"""A backend written only against SGLang's surface (no hicache_storage base class), as an SGLang author would.

It keys pages with everything that makes their bytes meaningful, as a careful SGLang backend should,
and never raises from a batch call. ``set_available`` lets the fault tests switch it off.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, ClassVar

import torch

_LOCK = threading.Lock()


class SGLangStyleStore:
    """In-memory store shared by every instance in the process; SGLang constructor and methods."""

    _pages: ClassVar[dict[str, bytes]] = {}

    def __init__(self, storage_config: Any, kwargs: dict[str, Any] | None = None) -> None:
        self.storage_config = storage_config
        self.kwargs = dict(kwargs or {})
        self.mem_pool_host: Any = None
        self.suffix = ""
        self.available = True

    def set_available(self, available: bool) -> None:
        self.available = available

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
        c = self.storage_config
        identity = [c.model_name, str(mem_pool_host.dtype), mem_pool_host.layout, mem_pool_host.page_size]
        identity += [mem_pool_host.size_per_token, type(mem_pool_host).__name__, getattr(mem_pool_host, "is_mla", "")]
        digest = hashlib.sha256(repr(identity).encode()).hexdigest()[:16]
        ranks = "" if c.is_mla_model else f"_tp{c.tp_rank}of{c.tp_size}"
        self.suffix = f"{digest}{ranks}_pp{c.pp_rank}of{c.pp_size}_cp{c.attn_cp_rank}of{c.attn_cp_size}"

    def _key(self, key: str) -> str:
        return f"{key}_{self.suffix}"

    def _load(self, key: str) -> bytes | None:
        """The stored page, or ``None`` when absent, unreachable or not exactly one page long."""
        if not self.available:
            return None
        with _LOCK:
            data = self._pages.get(self._key(key))
        page_bytes = self.mem_pool_host.size_per_token * self.mem_pool_host.page_size
        return data if data is not None and len(data) == page_bytes else None

    def _store(self, key: str, data: bytes) -> bool:
        if not self.available:
            return False
        with _LOCK:
            self._pages[self._key(key)] = data
        return True

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> torch.Tensor | None:
        return self.batch_get([key], None if target_location is None else [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> list[Any]:
        out: list[Any] = []
        for index, key in enumerate(keys):
            data = self._load(key)
            if data is None:
                out.append(None)
                continue
            target = (
                self.mem_pool_host.get_dummy_flat_data_page() if target_locations is None else target_locations[index]
            )
            target.view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            out.append(target)
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        raw = [v.contiguous().view(-1).view(torch.uint8).numpy().tobytes() for v in values]
        return all([self._store(k, data) for k, data in zip(keys, raw)])

    def exists(self, key: str) -> bool:
        return self._load(key) is not None

    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        count = 0
        for key in keys:
            if not self.exists(key):
                break
            count += 1
        return count

    def batch_get_v1(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None) -> list[bool]:
        size = self.mem_pool_host.page_size
        out = []
        for index, key in enumerate(keys):
            data = self._load(key)
            if data is None:
                out.append(False)
                continue
            flat = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(self.mem_pool_host.dtype)
            self.mem_pool_host.set_from_flat_data_page(int(host_indices[index * size]), flat)
            out.append(True)
        return out

    def batch_set_v1(self, keys: list[str], host_indices: torch.Tensor, extra_info: Any = None) -> list[bool]:
        size = self.mem_pool_host.page_size
        out = []
        for index, key in enumerate(keys):
            page = self.mem_pool_host.get_data_page(int(host_indices[index * size]), flat=True)
            out.append(self._store(key, page.view(torch.uint8).numpy().tobytes()))
        return out

    def clear(self) -> None:
        with _LOCK:
            self._pages.clear()

    def get_stats(self) -> None:
        return None
