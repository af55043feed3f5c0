"""Which backend the shipped suite module tests: set by the CLI, or read from environment variables.

Environment (for CI): ``HICACHE_CONFORMANCE_BACKEND`` (name or ``module:Class``; unset = skip),
``HICACHE_CONFORMANCE_CONFIG`` (JSON object or ``@file``), ``HICACHE_CONFORMANCE_ONLY``
(comma-separated categories), ``HICACHE_CONFORMANCE_CAPABILITIES`` (``name=value,...``),
``HICACHE_CONFORMANCE_MAX_EXAMPLES``, ``HICACHE_CONFORMANCE_SGLANG`` (``1`` = SGLang surface only),
``HICACHE_CONFORMANCE_HOOKS`` (``module:Name`` of the backend's conformance hooks),
``HICACHE_CONFORMANCE_PROFILE`` (``strict``), ``HICACHE_CONFORMANCE_REQUIRE`` (categories that may not
skip) and ``HICACHE_CONFORMANCE_FAIL_ON_SKIP`` (``1``: no test may skip).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_storage import ConfigError

from .categories import CATEGORIES
from .skips import SkipPolicy, parse_policy
from .target import parse_capability_overrides

__all__ = ["ENV_BACKEND", "Selection", "current", "parse_config", "split_categories", "use"]

ENV_BACKEND = "HICACHE_CONFORMANCE_BACKEND"
ENV_CONFIG = "HICACHE_CONFORMANCE_CONFIG"
ENV_ONLY = "HICACHE_CONFORMANCE_ONLY"
ENV_CAPABILITIES = "HICACHE_CONFORMANCE_CAPABILITIES"
ENV_MAX_EXAMPLES = "HICACHE_CONFORMANCE_MAX_EXAMPLES"
ENV_SGLANG = "HICACHE_CONFORMANCE_SGLANG"
ENV_HOOKS = "HICACHE_CONFORMANCE_HOOKS"
ENV_PROFILE = "HICACHE_CONFORMANCE_PROFILE"
ENV_REQUIRE = "HICACHE_CONFORMANCE_REQUIRE"
ENV_FAIL_ON_SKIP = "HICACHE_CONFORMANCE_FAIL_ON_SKIP"
_TRUE = ("1", "true", "yes")


@dataclass
class Selection:
    """A backend and how to test it.

    ``hooks``: the backend's conformance hooks (``module:Name``; ``None`` = by entry point);
    ``policy``: skips that fail their test instead (``None`` = every skip is a skip; the CLI judges
    skips after the run instead).
    """

    backend: str
    config: dict[str, Any] = field(default_factory=dict)
    only: tuple[str, ...] = ()
    overrides: dict[str, Any] = field(default_factory=dict)
    max_examples: int = 25
    sglang: bool | None = None
    hooks: str | None = None
    policy: SkipPolicy | None = None


_explicit: Selection | None = None


def use(selection: Selection | None) -> None:
    """Make ``selection`` the backend under test in this process (``None`` = back to the environment)."""
    global _explicit
    _explicit = selection


def parse_config(text: str, *, what: str = "--config") -> dict[str, Any]:
    """A JSON object given inline or as ``@path``; raises :class:`ConfigError` naming ``what``."""
    raw = text
    if text.startswith("@"):
        try:
            raw = Path(text[1:]).read_text()
        except OSError as exc:
            raise ConfigError(what, f"cannot read {text[1:]!r}: {exc}") from None
    try:
        value = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(
            what, f'not valid JSON ({exc}); expected an object such as \'{{"path": "/tmp/x"}}\''
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(what, f"expected a JSON object, got {type(value).__name__}")
    return value


def split_categories(values: list[str] | tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    """Flatten repeated/comma-separated category names; unknown names raise :class:`ConfigError`."""
    names = [part.strip() for value in values for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ConfigError("--only", f"unknown categories {unknown}; expected some of {list(known)}")
    return tuple(dict.fromkeys(names))


def current() -> Selection | None:
    """The explicit selection, else one built from the environment, else ``None``."""
    if _explicit is not None:
        return _explicit
    backend = os.environ.get(ENV_BACKEND, "").strip()
    if not backend:
        return None
    caps = [item for item in os.environ.get(ENV_CAPABILITIES, "").split(",") if item.strip()]
    examples = os.environ.get(ENV_MAX_EXAMPLES, "").strip()
    try:
        max_examples = int(examples) if examples else 25
    except ValueError:
        raise ConfigError(ENV_MAX_EXAMPLES, f"expected an integer, got {examples!r}") from None
    policy = parse_policy(
        os.environ.get(ENV_PROFILE, "").strip() or None,
        [os.environ.get(ENV_REQUIRE, "")],
        os.environ.get(ENV_FAIL_ON_SKIP, "").strip().lower() in _TRUE,
    )
    return Selection(
        backend=backend,
        config=parse_config(os.environ.get(ENV_CONFIG, ""), what=ENV_CONFIG),
        only=split_categories([os.environ.get(ENV_ONLY, "")], CATEGORIES),
        overrides=parse_capability_overrides(caps),
        max_examples=max_examples,
        sglang=True if os.environ.get(ENV_SGLANG, "").strip().lower() in _TRUE else None,
        hooks=os.environ.get(ENV_HOOKS, "").strip() or None,
        policy=policy if policy.active else None,
    )
