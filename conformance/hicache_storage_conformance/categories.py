"""Category names and the category of a test (light: imports none of the suite's test modules)."""

from __future__ import annotations

__all__ = ["CATEGORIES", "category_of", "rule_of"]

#: Category names in report order (one suite module and mixin each; ``base`` checks they agree).
CATEGORIES: tuple[str, ...] = (
    "lifecycle",
    "roundtrip",
    "batch",
    "isolation",
    "overwrite",
    "integrity",
    "concurrency",
    "persistence",
    "delete",
    "clear",
    "eviction",
    "zero_copy",
    "bad_input",
    "faults",
    "model",
    "multi_pool",
    "cross_tp",
)


def category_of(cls: type, test_name: str) -> str | None:
    """Category of test method ``test_name`` on ``cls`` (the mixin that defines it)."""
    for klass in cls.__mro__:
        if "category" in vars(klass) and test_name in vars(klass):
            return str(vars(klass)["category"])
    for klass in cls.__mro__:
        if test_name in vars(klass):
            for category in sorted(CATEGORIES, key=len, reverse=True):
                if test_name.startswith(f"test_{category}_"):
                    return category
    return None


def rule_of(function: object) -> str:
    """The contract rule a test checks: the first paragraph of its docstring, on one line."""
    doc = getattr(function, "__doc__", None) or ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())
