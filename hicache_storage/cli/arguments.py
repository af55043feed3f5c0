"""Argument helpers shared by the ``hicache-storage`` sub-commands.

The number types refuse values a command cannot use (``--timeout -1``) with one line naming the
value; the parser itself (defaults in ``--help``, "did you mean" for a mistyped option) is
:mod:`hicache_storage.command_line`'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["parse_json_option", "positive_float", "positive_int"]


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (seconds, rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


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
