"""The storage config an engine passes, as keyword fields: SGLang 0.5.23's ``HiCacheStorageConfig`` fields."""

from __future__ import annotations

from typing import Any


def engine_fields(extra_config: dict[str, Any] | None, **overrides: Any) -> dict[str, Any]:
    """Fields of a single-rank, non-MLA, page-first engine config; ``overrides`` change or add fields."""
    fields: dict[str, Any] = {
        "tp_rank": 0,
        "tp_size": 1,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": False,
        "enable_storage_metrics": True,
        "is_page_first_layout": True,
        "model_name": "org/model",
        "extra_config": extra_config,
    }
    fields.update(overrides)
    return fields
