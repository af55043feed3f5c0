"""What one replay run is configured with: the mode, the device and host sizes, the model geometry."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .models import ModelPreset, ReplayGeometry

__all__ = ["DEFAULT_RATIO", "MODES", "EngineConfig", "ModelShape"]

MODES = ("none", "cache", "buffer_only")
DEFAULT_RATIO = {"none": 0.0, "cache": 2.0, "buffer_only": 1.2}


@dataclass(frozen=True)
class ModelShape:
    """KV geometry per token: ``2 * layers * kv_heads * head_dim * itemsize`` bytes (MHA)."""

    layers: int = 1
    kv_heads: int = 1
    head_dim: int = 16
    dtype: str = "uint8"

    @classmethod
    def parse(cls, text: str) -> ModelShape:
        """``"layers,kv_heads,head_dim,dtype"``, e.g. ``"32,8,128,bfloat16"``."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 4:
            raise ValueError(f"--model-shape expects layers,kv_heads,head_dim,dtype; got {text!r}")
        try:
            layers, heads, dim = (int(p) for p in parts[:3])
        except ValueError:
            raise ValueError(f"--model-shape: layers, kv_heads and head_dim must be integers; got {text!r}") from None
        if min(layers, heads, dim) < 1:
            raise ValueError(f"--model-shape: every dimension must be positive; got {text!r}")
        return cls(layers, heads, dim, parts[3])

    @classmethod
    def from_bytes_per_token(cls, nbytes: int) -> ModelShape:
        """One layer, one head, uint8: ``head_dim = nbytes / 2`` (``nbytes`` must be even)."""
        if nbytes < 2 or nbytes % 2:
            raise ValueError(f"--bytes-per-token must be an even number >= 2, got {nbytes}")
        return cls(1, 1, nbytes // 2, "uint8")

    def pool_kwargs(self) -> dict[str, Any]:
        return {"layer_num": self.layers, "head_num": self.kv_heads, "head_dim": self.head_dim, "dtype": self.dtype}


@dataclass(frozen=True)
class EngineConfig:
    """Everything one replay run needs besides the trace and the backend."""

    mode: str = "cache"
    device_tokens: int = 262_144
    host_ratio: float | None = None
    page_size: int = 64
    block_tokens: int = 512
    shape: ModelShape = ModelShape()
    prefill_tokens_per_s: float = 20_000.0
    model: ModelPreset | None = None  # a model geometry; its KV gets ``shape``'s bytes per token
    #: Name the earlier pages of the chain in each storage call (``extra_info.prefix_keys``), as SGLang
    #: does with ``hicache_storage_pass_prefix_keys`` set in its storage extra config (cache mode, KV pages).
    pass_prefix_keys: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; expected one of {list(MODES)}")
        if self.device_tokens < self.page_size:
            raise ValueError(f"--device-tokens {self.device_tokens} must hold at least one page of {self.page_size}")
        if self.host_ratio is not None and not self.host_ratio > 0:
            raise ValueError(f"--host-ratio must be positive, got {self.host_ratio}")
        if not self.prefill_tokens_per_s > 0:
            raise ValueError(f"--prefill-tokens-per-s must be positive, got {self.prefill_tokens_per_s}")

    @property
    def ratio(self) -> float:
        """Host/device size ratio (mode default when not set)."""
        if self.mode == "none":
            return 0.0
        return self.host_ratio if self.host_ratio is not None else DEFAULT_RATIO[self.mode]

    @property
    def device_pages(self) -> int:
        return self.device_tokens // self.page_size

    @property
    def host_pages(self) -> int:
        return max(1, math.ceil(self.device_pages * self.ratio)) if self.mode != "none" else 0

    def geometry(self) -> ReplayGeometry | None:
        """The model as replayed (``None`` without a model)."""
        if self.model is None:
            return None
        real = 2 * self.shape.layers * self.shape.kv_heads * self.shape.head_dim * _itemsize(self.shape.dtype)
        return ReplayGeometry.build(self.model, self.page_size, real, self.device_tokens)


def _itemsize(dtype: str) -> int:
    import torch

    from ..host_pool import parse_dtype

    return int(torch.empty((), dtype=parse_dtype(dtype)).element_size())
