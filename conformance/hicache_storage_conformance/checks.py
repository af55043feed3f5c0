"""Assertions that say what was expected and what came back, in words a backend author can act on.

:class:`Mismatch` is an ``AssertionError`` carrying ``what`` (the call or situation), ``expected``,
``actual`` and optionally the contract ``rule``; the report shows them in the table and the JSON.
:func:`describe_page` names what a page read back is (a miss, another version of the key, another
key's page, the untouched sentinel, bytes mixing two writes) instead of printing kilobytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .pages import key_hash, page_content, stamp_of

__all__ = ["SENTINEL", "Mismatch", "check", "check_equal", "check_pages", "describe_page", "short_key", "summarize"]

#: Byte pattern written into slots before a read, to see which slots a backend touched.
SENTINEL = 0xA5


class Mismatch(AssertionError):
    """A contract check that failed: ``what`` was expected to give ``expected`` and gave ``actual``."""

    def __init__(self, what: str, expected: Any, actual: Any, *, rule: str = "", hint: str = "") -> None:
        self.what = what
        self.expected = _clip(expected if isinstance(expected, str) else repr(expected))
        self.actual = _clip(actual if isinstance(actual, str) else repr(actual))
        self.rule = rule
        self.hint = hint
        text = f"{what}: expected {self.expected}; got {self.actual}"
        super().__init__(text + (f" ({hint})" if hint else ""))


def _clip(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def check(condition: bool, what: str, expected: Any, actual: Any, *, rule: str = "", hint: str = "") -> None:
    """Raise :class:`Mismatch` unless ``condition``."""
    if not condition:
        raise Mismatch(what, expected, actual, rule=rule, hint=hint)


def check_equal(actual: Any, expected: Any, what: str, *, rule: str = "", hint: str = "") -> None:
    """Raise :class:`Mismatch` unless ``actual == expected``."""
    if actual != expected:
        raise Mismatch(what, expected, actual, rule=rule, hint=hint)


def summarize(value: Any) -> Any:
    """``value`` with tensors and byte strings replaced by short descriptions (for messages)."""
    if isinstance(value, list):
        return [summarize(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    nbytes = getattr(value, "nbytes", None)
    if nbytes is not None and hasattr(value, "dtype"):
        return f"<a tensor of {nbytes} bytes>"
    return value


def short_key(key: str) -> str:
    """A key shortened for messages."""
    return key if len(key) <= 12 else f"{key[:10]}…"


def describe_page(
    data: bytes | None, key: str, version: int | None, *, others: Sequence[str] = (), label: str = ""
) -> str:
    """What ``data``, read for ``key``, is: compared with the page of ``key`` at ``version``."""
    if data is None:
        return "a miss"
    name = label or key
    if version is not None and data == page_content(name, version, len(data)):
        return f"version {version} of the key"
    if data and data == bytes([SENTINEL]) * len(data):
        return f"the sentinel bytes 0x{SENTINEL:02X} the suite put in the slot (nothing was read into it)"
    if not any(data):
        return "all zero bytes"
    stamped_key, stamped = stamp_of(data)
    if stamped_key == key_hash(name):
        if data == page_content(name, stamped, len(data)):
            return f"version {stamped} of the key (a stale or wrong version)"
        return f"bytes mixing two writes of the key (its stamp says version {stamped})"
    for index, other in enumerate(others):
        if other != key and stamped_key == key_hash(other):
            return f"the page of another key (key {index} of the batch, {short_key(other)})"
    if version is not None:
        expected = page_content(name, version, len(data))
        first = next((i for i, (a, b) in enumerate(zip(data, expected)) if a != b), min(len(data), len(expected)))
        return f"{len(data)} bytes that are no page the suite wrote (first difference at byte {first})"
    return f"{len(data)} bytes that are no page the suite wrote"


def check_pages(
    got: Sequence[bytes | None],
    keys: Sequence[str],
    versions: int | Sequence[int | None],
    what: str,
    *,
    may_evict: bool = False,
    labels: Sequence[str] | None = None,
    rule: str = "",
) -> None:
    """Every page of ``got`` is the page of its key at its version (``None`` = a miss expected).

    With ``may_evict`` a miss is accepted where a hit was expected (wrong bytes never are).
    """
    wanted = [versions] * len(keys) if isinstance(versions, int) else list(versions)
    if len(got) != len(keys):
        raise Mismatch(what, f"{len(keys)} results", f"{len(got)} results", rule=rule)
    names = list(labels) if labels is not None else list(keys)
    for index, (data, key, version, name) in enumerate(zip(got, keys, wanted, names)):
        if version is None:
            if data is not None:
                actual = describe_page(data, key, None, others=keys, label=name)
                raise Mismatch(f"{what}, page {index} of {len(keys)}", "a miss (never written)", actual, rule=rule)
            continue
        if data is None and may_evict:
            continue
        if data is None or data != page_content(name, version, len(data)):
            actual = describe_page(data, key, version, others=keys, label=name)
            raise Mismatch(
                f"{what}, page {index} of {len(keys)} (key {short_key(key)})",
                f"version {version} of the key, byte-exact",
                actual,
                rule=rule,
            )
