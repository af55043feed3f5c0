"""Argument helpers shared by the ``hicache-storage`` sub-commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["parse_json_option"]


def parse_json_option(value: str | None, option: str = "--config") -> dict[str, Any]:
    """Parse a ``--config`` value: inline JSON or ``@file``; must be a JSON object."""
    if value is None:
        return {}
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(option, f"cannot read {value[1:]!r}: {exc.strerror}") from None
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(option, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(parsed, dict):
        raise ConfigError(option, f"expected a JSON object, got {type(parsed).__name__}")
    return parsed
