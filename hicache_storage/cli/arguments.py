"""Argument helpers shared by the ``hicache-storage`` sub-commands.

:class:`Parser` shows every option's default in ``--help`` and, for an option it does not know,
names the closest one it does (``--jsno`` → "did you mean --json?"); the number types refuse
values a command cannot use (``--timeout -1``) with one line naming the value.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..errors import ConfigError
from ..options import did_you_mean

__all__ = [
    "HelpFormatter",
    "Parser",
    "UsageError",
    "parse_json_option",
    "positive_float",
    "positive_int",
    "unrecognized",
]


class UsageError(ValueError):
    """Bad command-line input: the CLI prints it as one line and exits with status 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help when it has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "%(default)" in text or not action.option_strings or default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`UsageError` (one line) instead of exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def unrecognized(parser: argparse.ArgumentParser, tokens: Sequence[str]) -> str:
    """One line for arguments ``parser`` does not take, naming the closest option for each."""
    known = [option for action in parser._actions for option in action.option_strings]
    parts = []
    for token in tokens:
        name = token.split("=", 1)[0]
        if name.startswith("-"):
            parts.append(f"unknown option {name}{did_you_mean(name, known)}")
        else:
            parts.append(f"unexpected argument {token!r}")
    return f"{parser.prog}: " + "; ".join(parts) + f" (see {parser.prog} --help)"


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
