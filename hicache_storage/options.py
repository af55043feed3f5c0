"""Typed backend options: a backend declares a dataclass, the SDK parses ``extra_config`` into it.

Unknown options and values of the wrong type raise :class:`ConfigError` naming the option and what
would be right, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import ConfigError

__all__ = ["NoOptions", "parse_options", "option_help"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """Options class of a backend that takes none."""


def _accepts(annotation: Any, value: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def parse_options(options_cls: type[T], values: Mapping[str, Any], *, prefix: str = "extra_config") -> T:
    """Build ``options_cls`` (a dataclass) from ``values``.

    Raises :class:`ConfigError` for an unknown option (listing the valid ones), a missing required
    option, or a value whose type does not match the field annotation. ``__post_init__`` of the
    dataclass may raise :class:`ConfigError` for semantic checks.
    """
    if not dataclasses.is_dataclass(options_cls):
        raise TypeError(f"{options_cls!r} is not a dataclass")
    hints = typing.get_type_hints(options_cls)
    fields = {f.name: f for f in dataclasses.fields(options_cls) if f.init}
    for name in values:
        if name not in fields:
            valid = ", ".join(sorted(fields)) or "none"
            raise ConfigError(f"{prefix}.{name}", f"unknown option; valid options: {valid}")
    for name, field in fields.items():
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if name not in values:
            if required:
                raise ConfigError(f"{prefix}.{name}", "required option is missing")
            continue
        value = values[name]
        annotation = hints.get(name, Any)
        if not _accepts(annotation, value):
            raise ConfigError(
                f"{prefix}.{name}",
                f"expected {_describe(annotation)}, got {type(value).__name__} {value!r}",
            )
    kwargs = {name: (float(v) if hints.get(name) is float and isinstance(v, int) else v) for name, v in values.items()}
    return options_cls(**kwargs)


def _describe(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def option_help(options_cls: type[Any]) -> list[tuple[str, str, str]]:
    """(name, type, default) of every option, for documentation and CLI listings."""
    hints = typing.get_type_hints(options_cls)
    rows = []
    for field in dataclasses.fields(options_cls):
        if field.default is not dataclasses.MISSING:
            default = repr(field.default)
        elif field.default_factory is not dataclasses.MISSING:
            default = repr(field.default_factory())
        else:
            default = "required"
        rows.append((field.name, _describe(hints.get(field.name, Any)), default))
    return rows
