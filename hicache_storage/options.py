"""Typed backend options: a backend declares a dataclass, the SDK parses ``extra_config`` into it.

Unknown options and values of the wrong type raise :class:`ConfigError` naming the option and what
would be right, so a typo never silently falls back to a default. Numbers are checked once here for
every backend: a float option must be finite (``NaN`` and infinities are refused unless the field
opts in with ``metadata={"allow_nonfinite": True}``) and an int option must fit in 64 bits; each
options class checks its own ranges in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError

__all__ = [
    "ALLOW_NONFINITE",
    "INT64_MAX",
    "SECRET",
    "NoOptions",
    "check_number",
    "did_you_mean",
    "option_help",
    "parse_options",
    "secret_option",
    "secret_option_names",
]

#: Field metadata key that lets a float option take ``NaN`` or an infinity.
ALLOW_NONFINITE = "allow_nonfinite"
#: Field metadata key of an option whose value never appears in an error message (see :func:`secret_option`).
SECRET = "secret"
#: Largest magnitude of an int option (values reach C libraries and wire protocols as 64-bit ints).
INT64_MAX = 2**63 - 1

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """Options class of a backend that takes none."""


def secret_option(
    default: Any = None, *, default_factory: Callable[[], Any] | None = None, required: bool = False
) -> Any:
    """A dataclass field for a credential (password, key, URL with user-info, options holding keys).

    ``default`` (or ``default_factory``) is its value when not given; ``required=True`` makes it
    required. :func:`parse_options` checks its type like any other option's but never echoes the
    value in an error; :func:`secret_option_names` lists such fields for a backend's ``__repr__``.
    """
    metadata = {SECRET: True}
    if required:
        return dataclasses.field(metadata=metadata)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def secret_option_names(options_cls: type[Any]) -> tuple[str, ...]:
    """Names of the fields of ``options_cls`` declared with :func:`secret_option`."""
    return tuple(f.name for f in dataclasses.fields(options_cls) if f.metadata.get(SECRET))


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

    Raises :class:`ConfigError` for an unknown option (listing the valid ones; for a name in the class's
    ``removed_options`` mapping, saying what replaced it), a missing required option, or a value whose
    type does not match the field annotation. ``__post_init__`` of the dataclass may raise
    :class:`ConfigError` for semantic checks.
    """
    if not dataclasses.is_dataclass(options_cls):
        raise TypeError(f"{options_cls!r} is not a dataclass")
    hints = typing.get_type_hints(options_cls)
    fields = {f.name: f for f in dataclasses.fields(options_cls) if f.init}
    removed: Mapping[str, str] = getattr(options_cls, "removed_options", {})
    for name in values:
        if name in removed and name not in fields:
            raise ConfigError(f"{prefix}.{name}", f"no longer an option: {removed[name]}")
        if name not in fields:
            valid = ", ".join(sorted(fields)) or "none"
            raise ConfigError(f"{prefix}.{name}", f"unknown option{did_you_mean(name, fields)}; valid options: {valid}")
    for name, field in fields.items():
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        if name not in values:
            if required:
                raise ConfigError(f"{prefix}.{name}", "required option is missing")
            continue
        value = values[name]
        annotation = hints.get(name, Any)
        if not _accepts(annotation, value):
            shown = "(value not shown)" if field.metadata.get(SECRET) else repr(value)
            raise ConfigError(
                f"{prefix}.{name}",
                f"expected {_describe(annotation)}, got {type(value).__name__} {shown}",
            )
        check_number(f"{prefix}.{name}", value, allow_nonfinite=bool(field.metadata.get(ALLOW_NONFINITE)))
    kwargs = {name: (_as_float(v) if _wants_float(hints.get(name)) else v) for name, v in values.items()}
    return options_cls(**kwargs)


def did_you_mean(name: str, choices: typing.Iterable[str]) -> str:
    """`` (did you mean X?)`` for the choice closest to a mistyped ``name``, or ``""`` when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def check_number(option: str, value: Any, *, allow_nonfinite: bool = False) -> None:
    """Raise :class:`ConfigError` naming ``option`` for a non-finite float or an int beyond 64 bits.

    Anything that is not a number (``bool`` included) passes: its type is checked elsewhere.
    """
    if isinstance(value, bool):
        return
    if isinstance(value, float) and not allow_nonfinite and not math.isfinite(value):
        raise ConfigError(option, f"must be a finite number, got {value!r}")
    if isinstance(value, int) and abs(value) > INT64_MAX:
        raise ConfigError(option, f"must fit in 64 bits, got {value!r}")


def _wants_float(annotation: Any) -> bool:
    """Whether an int given for this field should become a float (``float``, ``float | None``)."""
    if annotation is float:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return float in args and int not in args
    return False


def _as_float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


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


def resolve_directory(path: str | None, env_name: str, option: str = "extra_config.path") -> Path:
    """A backend's storage directory from ``path`` or the environment variable ``env_name``.

    Raises :class:`ConfigError` naming ``option`` when neither is given or the path is not a directory.
    """
    raw = path if path is not None else os.environ.get(env_name, "")
    if not raw.strip():
        raise ConfigError(option, f"required: give a directory in {option} or set the {env_name} environment variable")
    root = Path(raw).expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(option, f"{str(root)!r} exists and is not a directory")
    return root
