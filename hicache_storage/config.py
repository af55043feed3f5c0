"""Configuration types that mirror SGLang's ``HiCacheStorageConfig`` and ``HiCacheStorageExtraInfo``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["HiCacheStorageConfig", "HiCacheStorageExtraInfo", "SDK_OPTION_NAMES", "make_config"]


@dataclass
class HiCacheStorageConfig:
    """Per-rank storage configuration; field order and defaults match SGLang 0.5.23.

    ``is_mla_model`` means "every rank holds identical KV": all ranks share keys.
    Backend options, and the SDK options listed in :data:`SDK_OPTION_NAMES`, live in
    ``extra_config``.

    ``identity_fields``: fields of an engine's config that the SDK does not interpret (e.g. a
    newer SGLang's ``model_identity_hash``); they enter every storage key's digest, so
    deployments that differ in them never share pages.
    """

    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: str | None
    tp_lcm_size: int | None = None
    should_split_heads: bool = False
    dp_rank: int = 0
    extra_config: dict[str, Any] | None = None
    dcp_size: int = 1
    dcp_rank: int = 0
    logical_page_size: int | None = None
    identity_fields: dict[str, Any] = field(default_factory=dict)

    @property
    def is_storage_writer(self) -> bool:
        """Whether this rank writes pages (SGLang's rule: every rank, or for MLA the first of each group)."""
        return not self.is_mla_model or self.tp_rank == self.dcp_rank


@dataclass
class HiCacheStorageExtraInfo:
    """Optional per-call information; ``prefix_keys`` are the hashes of earlier pages of the chain."""

    prefix_keys: list[str] | None = None
    extra_info: dict[str, Any] | None = None


#: ``extra_config`` keys consumed by the SDK itself (not passed to a backend's options).
#: ``metrics_*`` configure the SGLang adapter's metrics export; the last four are the keys SGLang's
#: dynamic loader puts into the same dict.
SDK_OPTION_NAMES: frozenset[str] = frozenset(
    {
        "namespace",
        "model_revision",
        "manifests",
        "pinned",
        "resilience",
        "metrics_textfile",
        "metrics_interval_s",
        "backend",
        "backend_name",
        "module_path",
        "class_name",
        "interface_v1",
        "tp_lcm_size",
        "head_shards",
        "kv_heads",
    }
)


def make_config(
    model_name: str = "model",
    *,
    tp_rank: int = 0,
    tp_size: int = 1,
    pp_rank: int = 0,
    pp_size: int = 1,
    cp_rank: int = 0,
    cp_size: int = 1,
    is_mla_model: bool = False,
    is_page_first_layout: bool = True,
    extra_config: dict[str, Any] | None = None,
) -> HiCacheStorageConfig:
    """A :class:`HiCacheStorageConfig` with single-rank defaults, for scripts and tests."""
    return HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=pp_rank,
        pp_size=pp_size,
        attn_cp_rank=cp_rank,
        attn_cp_size=cp_size,
        is_mla_model=is_mla_model,
        enable_storage_metrics=False,
        is_page_first_layout=is_page_first_layout,
        model_name=model_name,
        extra_config=dict(extra_config or {}),
    )
