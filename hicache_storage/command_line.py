"""Pieces of ``argparse`` every command-line tool of the SDK shares (the CLI and the conformance suite's).

:class:`Parser` raises :class:`UsageError` (one line) instead of printing usage and exiting, and
formats help with :class:`HelpFormatter`, which shows each option's default; :func:`unrecognized` turns the
arguments a parser does not take into one line naming the closest option for each;
:func:`suggest_choice` adds "did you mean" to argparse's "invalid choice" message;
:func:`parse_arguments` puts them together.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, NoReturn

from .options import did_you_mean

__all__ = ["HelpFormatter", "Parser", "UsageError", "parse_arguments", "suggest_choice", "unrecognized"]


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help when it has a default worth showing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        empty = isinstance(default, (list, tuple, dict, str)) and not default
        if "%(default)" in text or not action.option_strings or empty or default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)")
_CHOICES = re.compile(r"'([^']*)'")


def unrecognized(parser: argparse.ArgumentParser, tokens: Sequence[str]) -> str:
    """One line for arguments ``parser`` does not take, naming the closest option for each (the value
    after an unknown option is taken to be its own)."""
    known = [option for action in parser._actions for option in action.option_strings]
    parts = []
    skip = False
    for index, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name.startswith("-"):
            parts.append(f"unknown option {name}{did_you_mean(name, known)}")
            following = tokens[index + 1] if index + 1 < len(tokens) else None
            skip = "=" not in token and following is not None and not following.startswith("-")
        else:
            parts.append(f"unexpected argument {token!r}")
    return f"{parser.prog}: " + "; ".join(parts) + f" (see {parser.prog} --help)"


def suggest_choice(message: str) -> str:
    """argparse's error ``message``, with the closest choice named when it is an "invalid choice"."""
    choice = _INVALID_CHOICE.search(message)
    if choice is None:
        return message
    return message + did_you_mean(choice["value"], _CHOICES.findall(choice["choices"]))


class UsageError(ValueError):
    """Bad command-line input: the CLI prints it as one line and exits with status 2."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`UsageError` (one line) instead of exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {suggest_choice(message)}")


def _chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The sub-command parser ``args`` went through (``parser`` itself without sub-commands)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if isinstance(chosen, argparse.ArgumentParser):
                return _chosen_parser(chosen, args)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed by ``parser``; :class:`UsageError` for anything it does not take, naming the
    closest option of the sub-command that was chosen."""
    args, extra = parser.parse_known_args(list(argv))
    if extra:
        raise UsageError(unrecognized(_chosen_parser(parser, args), extra))
    return args
