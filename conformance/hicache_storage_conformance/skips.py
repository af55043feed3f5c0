"""Why a test skipped, what would enable it, and which skips a run may accept.

Every skip of the suite has a *kind*:

- ``capability``: the backend does not declare the capability the test checks (nothing promised,
  nothing to check);
- ``surface``: the class does not offer the calls the test needs (SGLang's surface has no
  ``close()``, a class without ``batch_get_v1``, without the v2 calls);
- ``hook``: the suite lacks a side channel or fault hook to check the promise (a test-only hook
  would enable it);
- ``unobserved``: the promise is made but this run could not observe it (no page was evicted at
  this volume, a store declared shared that a second instance does not see);
- ``other``: anything else.

A :class:`SkipPolicy` says which skips fail a run: ``fail_on_skip`` (any), ``require`` (any in the
named categories) and the ``strict`` profile (any but ``capability`` and ``surface``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hicache_storage import ConfigError

__all__ = [
    "ACCEPTED_BY_STRICT",
    "CAPABILITY",
    "HOOK",
    "KINDS",
    "OTHER",
    "PROFILES",
    "PROPERTY_ENABLE",
    "PROPERTY_KIND",
    "SURFACE",
    "UNOBSERVED",
    "SkipPolicy",
    "enable_capability",
    "parse_policy",
]

CAPABILITY, SURFACE, HOOK, UNOBSERVED, OTHER = "capability", "surface", "hook", "unobserved", "other"
KINDS = (CAPABILITY, SURFACE, HOOK, UNOBSERVED, OTHER)
#: Skip kinds the strict profile accepts: the backend promised nothing there.
ACCEPTED_BY_STRICT = frozenset({CAPABILITY, SURFACE})
PROFILES = ("default", "strict")

#: ``user_properties`` names under which a test records its skip's kind and what would enable it.
PROPERTY_KIND = "hicache_skip_kind"
PROPERTY_ENABLE = "hicache_skip_enable"

#: What enables a test whose hook is missing.
ENABLE_SIDE_CHANNEL = (
    "give the suite a side channel: conformance hooks whose raw_store(backend) returns the stored records "
    "by storage key (or read_stored/write_stored/delete_stored), registered in the entry-point group "
    "hicache_storage.conformance_hooks under the backend's name or passed with --hooks"
)
ENABLE_FAULT_HOOK = (
    "give the suite a fault hook: stop_server(backend)/start_server(backend) on the backend's conformance "
    "hooks (entry-point group hicache_storage.conformance_hooks, or --hooks) or on the test class"
)
ENABLE_SDK = "test it through the SDK surface: implement hicache_storage.plugin.Backend"


def enable_capability(name: str) -> str:
    """What enables a test gated on capability ``name``."""
    return (
        f"declare {name}=True in the backend's Capabilities (or capabilities_for(options)) if it holds, "
        f"or check it anyway with --capability-override {name}=true"
    )


@dataclass(frozen=True)
class SkipPolicy:
    """Which skips fail a run (see the module docstring)."""

    profile: str = "default"
    require: tuple[str, ...] = ()
    fail_on_skip: bool = False

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError("--profile", f"unknown profile {self.profile!r}; expected one of {list(PROFILES)}")

    @property
    def active(self) -> bool:
        """Whether any skip can fail a run under this policy."""
        return self.fail_on_skip or bool(self.require) or self.profile == "strict"

    def violation(self, category: str, kind: str) -> str | None:
        """Why a skip of ``kind`` in ``category`` fails the run, or ``None`` when it may skip."""
        if self.fail_on_skip:
            return "fail-on-skip: no test may skip"
        if category in self.require:
            return f"category {category} is required: none of its tests may skip"
        if self.profile == "strict" and kind not in ACCEPTED_BY_STRICT:
            return "the strict profile accepts only skips for capabilities (or calls) the backend does not declare"
        return None

    def describe(self) -> str:
        """One line for report headers."""
        parts = [f"profile {self.profile}"]
        if self.require:
            parts.append(f"required: {', '.join(self.require)}")
        if self.fail_on_skip:
            parts.append("fail on any skip")
        return "; ".join(parts)


def parse_policy(profile: str | None, require: list[str] | tuple[str, ...], fail_on_skip: bool) -> SkipPolicy:
    """A policy from command-line style values; unknown categories or profiles raise :class:`ConfigError`."""
    from .categories import CATEGORIES

    names = [part.strip() for value in require for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in CATEGORIES]
    if unknown:
        raise ConfigError("--require", f"unknown categories {unknown}; expected some of {list(CATEGORIES)}")
    return SkipPolicy(profile or "default", tuple(dict.fromkeys(names)), bool(fail_on_skip))
