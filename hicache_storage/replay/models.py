"""Model geometries for the replay: KV bytes per token, sidecar pools and the rule that gates a prefix.

A :class:`ModelPreset` describes a model as the storage tier sees it: KV bytes per token (MHA or
MLA), and sidecar pools with their model-sized units (SWA: bytes per token of the sliding-window
layers and the window; Mamba/GDN: bytes of one recurrent state). ``checkpoint_tokens`` says where
the engine keeps sidecar state: at the end of every computed run and every ``checkpoint_tokens``
tokens inside it (0: at the end only). Backups are offered as one span per checkpoint, so each
span ends where its state was saved.

The replay moves real bytes, scaled down: KV gets ``bytes_per_token`` real bytes per token (32 by
default) and every sidecar unit the same fraction of its model size, so I/O times modelled on
the real bytes (the sim backend with its bandwidth divided by :attr:`ReplayGeometry.scale`) are
those of the model. Presets: ``dense``, ``mla``, ``swa-hybrid``, ``mamba-hybrid``; a JSON file
with the same fields describes any other model (see ``docs/replay.md``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["PRESETS", "ModelPreset", "ReplayGeometry", "SidecarSpec", "load_model"]

_KINDS = ("swa", "mamba")


@dataclass(frozen=True)
class SidecarSpec:
    """One sidecar pool of a model.

    ``kind`` ``swa``: ``bytes_per_token`` of the sliding-window layers' KV, ``window_tokens`` of
    attention window. ``kind`` ``mamba``: one state of ``temporal_bytes`` (SSM state) plus
    ``conv_bytes`` (conv state) for all layers. ``device_memory_ratio``: device memory for this
    pool relative to the KV pool's (SGLang: ``swa_full_tokens_ratio`` 0.8 counts tokens,
    ``mamba_full_memory_ratio`` 0.9 counts bytes).
    """

    kind: str
    name: str = ""
    bytes_per_token: int = 0
    window_tokens: int = 0
    temporal_bytes: int = 0
    conv_bytes: int = 0
    device_memory_ratio: float = 0.9

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"sidecar kind {self.kind!r}: expected one of {list(_KINDS)}")
        if not self.name:
            object.__setattr__(self, "name", self.kind)
        if self.kind == "swa" and (self.bytes_per_token < 1 or self.window_tokens < 1):
            raise ValueError(f"sidecar {self.name!r}: swa needs bytes_per_token >= 1 and window_tokens >= 1")
        if self.kind == "mamba" and self.temporal_bytes + self.conv_bytes < 1:
            raise ValueError(f"sidecar {self.name!r}: mamba needs temporal_bytes + conv_bytes >= 1")
        if not self.device_memory_ratio > 0:
            raise ValueError(f"sidecar {self.name!r}: device_memory_ratio must be positive")

    def unit_model_bytes(self, page_size: int) -> int:
        """Model bytes of one unit: an SWA page, or one state."""
        return self.bytes_per_token * page_size if self.kind == "swa" else self.temporal_bytes + self.conv_bytes

    def window_pages(self, page_size: int) -> int:
        """Units a restore needs: the window in pages (SWA), one state (Mamba)."""
        return max(1, math.ceil(self.window_tokens / page_size)) if self.kind == "swa" else 1


@dataclass(frozen=True)
class ModelPreset:
    """A model's storage geometry (see the module docstring)."""

    name: str
    kv_bytes_per_token: int
    is_mla: bool = False
    sidecars: tuple[SidecarSpec, ...] = ()
    checkpoint_tokens: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if self.kv_bytes_per_token < 1:
            raise ValueError(f"model {self.name!r}: kv_bytes_per_token must be positive")
        if self.checkpoint_tokens < 0:
            raise ValueError(f"model {self.name!r}: checkpoint_tokens must be >= 0")
        names = [s.name for s in self.sidecars]
        if len(set(names)) != len(names) or "kv" in names:
            raise ValueError(f"model {self.name!r}: sidecar names must be distinct and not 'kv', got {names}")

    @property
    def hybrid(self) -> bool:
        """Whether sidecars gate the prefixes."""
        return bool(self.sidecars)

    def describe(self) -> dict[str, Any]:
        """Plain values for reports."""
        return {
            "name": self.name,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "is_mla": self.is_mla,
            "checkpoint_tokens": self.checkpoint_tokens,
            "sidecars": [dict(vars(s)) for s in self.sidecars],
            "description": self.description,
        }


PRESETS: dict[str, ModelPreset] = {
    "dense": ModelPreset(
        "dense",
        kv_bytes_per_token=2 * 32 * 8 * 128 * 2,
        description="Llama-3-8B-like: 32 layers, 8 KV heads x 128, bf16 (128 KiB/token)",
    ),
    "mla": ModelPreset(
        "mla",
        kv_bytes_per_token=61 * (512 + 64) * 2,
        is_mla=True,
        description="DeepSeek-V3-like MLA: 61 layers x (512 + 64) latent dims, bf16 (68.6 KiB/token)",
    ),
    "swa-hybrid": ModelPreset(
        "swa-hybrid",
        kv_bytes_per_token=2 * 18 * 8 * 64 * 2,
        sidecars=(SidecarSpec("swa", bytes_per_token=2 * 18 * 8 * 64 * 2, window_tokens=128, device_memory_ratio=0.8),),
        checkpoint_tokens=512,
        description="gpt-oss-120b-like: 18 full + 18 sliding-window (128 tokens) layers, 8 KV heads x 64, bf16",
    ),
    "mamba-hybrid": ModelPreset(
        "mamba-hybrid",
        kv_bytes_per_token=2 * 12 * 2 * 256 * 2,
        sidecars=(
            SidecarSpec(
                "mamba",
                temporal_bytes=36 * 32 * 128 * 128 * 4,
                conv_bytes=36 * 3 * 8192 * 2,
                device_memory_ratio=0.9,
            ),
        ),
        checkpoint_tokens=512,
        description="Qwen3-Next-80B-A3B-like: 12 full-attention layers (2 KV heads x 256, bf16) + 36 Gated "
        "DeltaNet layers (fp32 state 32 x 128 x 128, conv 3 x 8192 bf16): 73.7 MiB per state",
    ),
}


def load_model(value: str, checkpoint_tokens: int | None = None) -> ModelPreset:
    """A preset by name, or a model described by a JSON file (same fields as :class:`ModelPreset`)."""
    if value in PRESETS:
        model = PRESETS[value]
    else:
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"--model {value!r}: not a preset ({', '.join(PRESETS)}) nor a JSON file")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"--model {value}: cannot read the geometry ({exc})") from None
        model = _from_dict(data, path.stem)
    if checkpoint_tokens is not None:
        model = replace(model, checkpoint_tokens=checkpoint_tokens)
    return model


def _from_dict(data: Any, default_name: str) -> ModelPreset:
    if not isinstance(data, dict):
        raise ValueError("a model geometry must be a JSON object")
    known = {"name", "kv_bytes_per_token", "is_mla", "sidecars", "checkpoint_tokens", "description"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown model fields {sorted(unknown)}; expected {sorted(known)}")
    sidecars = data.get("sidecars", [])
    if not isinstance(sidecars, list) or not all(isinstance(s, dict) for s in sidecars):
        raise ValueError("'sidecars' must be a list of objects")
    try:
        specs = tuple(SidecarSpec(**s) for s in sidecars)
        return ModelPreset(
            name=str(data.get("name", default_name)),
            kv_bytes_per_token=int(data["kv_bytes_per_token"]),
            is_mla=bool(data.get("is_mla", False)),
            sidecars=specs,
            checkpoint_tokens=int(data.get("checkpoint_tokens", 0)),
            description=str(data.get("description", "")),
        )
    except KeyError as exc:
        raise ValueError(f"missing model field {exc}") from None
    except TypeError as exc:
        raise ValueError(f"bad model geometry: {exc}") from None


@dataclass(frozen=True)
class SidecarGeometry:
    """One sidecar as replayed: its spec, window and unit sizes (model and real)."""

    spec: SidecarSpec
    window: int
    model_unit_bytes: int
    real_unit_bytes: int
    device_units: int


@dataclass(frozen=True)
class ReplayGeometry:
    """A model as replayed with ``real_bytes_per_token`` real KV bytes per token (every size scaled alike)."""

    model: ModelPreset
    page_size: int
    real_bytes_per_token: int
    device_tokens: int
    sidecars: tuple[SidecarGeometry, ...] = field(default_factory=tuple)

    @classmethod
    def build(cls, model: ModelPreset, page_size: int, real_bytes_per_token: int, device_tokens: int) -> ReplayGeometry:
        if real_bytes_per_token < 2 or real_bytes_per_token % 2:
            raise ValueError(f"--bytes-per-token must be an even number >= 2, got {real_bytes_per_token}")
        if model.checkpoint_tokens % page_size:
            raise ValueError(f"checkpoint_tokens {model.checkpoint_tokens} must be a multiple of the page size")
        scale = real_bytes_per_token / model.kv_bytes_per_token
        sidecars = []
        for spec in model.sidecars:
            model_bytes = spec.unit_model_bytes(page_size)
            window = spec.window_pages(page_size)
            if spec.kind == "swa":  # an even number of bytes per token (one layer, one head, uint8 K and V)
                real = page_size * max(2, 2 * round(spec.bytes_per_token * scale / 2))
            else:
                real = max(2, round(model_bytes * scale))
            per_checkpoint = window
            device_bytes = spec.device_memory_ratio * device_tokens * model.kv_bytes_per_token
            if spec.kind == "swa":  # SGLang's ratio counts tokens
                device_bytes = spec.device_memory_ratio * device_tokens * spec.bytes_per_token
            units = max(2 * per_checkpoint, int(device_bytes // model_bytes))
            sidecars.append(SidecarGeometry(spec, window, model_bytes, real, units))
        return cls(model, page_size, real_bytes_per_token, device_tokens, tuple(sidecars))

    @property
    def scale(self) -> float:
        """Real bytes / model bytes (the same for every pool, up to rounding)."""
        return self.real_bytes_per_token / self.model.kv_bytes_per_token

    @property
    def checkpoint_pages(self) -> int:
        """Pages between kept states inside a computed run (0: only at its end)."""
        return self.model.checkpoint_tokens // self.page_size

    @property
    def device_checkpoints(self) -> int:
        """Checkpoints the device keeps: the fewest any sidecar's device memory holds."""
        return min((s.device_units // s.window for s in self.sidecars), default=0)

    def kv_pool_kwargs(self) -> dict[str, Any]:
        """DeviceKVPool/HostKVPool geometry of the real KV pages."""
        if self.model.is_mla:
            return {"layer_num": 1, "is_mla": True, "kv_cache_dim": self.real_bytes_per_token, "dtype": "uint8"}
        return {"layer_num": 1, "head_num": 1, "head_dim": self.real_bytes_per_token // 2, "dtype": "uint8"}
