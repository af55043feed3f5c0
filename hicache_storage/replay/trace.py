"""Parser of the Mooncake trace format: one JSON object per line.

Fields: ``timestamp`` (ms), ``input_length`` and ``output_length`` (tokens), ``hash_ids`` (one id per
block of ``block_tokens`` input tokens; the last block may be partial). Blank lines are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TraceError", "TraceRequest", "parse_trace", "read_trace"]


class TraceError(ValueError):
    """A malformed trace line; the message names the source, the line number and what was wrong."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of the trace (``index`` counts requests from 0, ``line`` is 1-based)."""

    index: int
    line: int
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int_field(obj: dict[str, object], name: str, where: str, *, minimum: int) -> int:
    if name not in obj:
        raise TraceError(f"{where}: missing field {name!r}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise TraceError(f"{where}: {name!r} must be >= {minimum}, got {value}")
    return value


def _parse_line(text: str, index: int, line: int, where: str, block_tokens: int) -> TraceRequest:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "timestamp" not in obj:
        raise TraceError(f"{where}: missing field 'timestamp'")
    stamp = obj["timestamp"]
    if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or stamp < 0:
        raise TraceError(f"{where}: 'timestamp' must be a non-negative number of ms, got {stamp!r}")
    input_length = _int_field(obj, "input_length", where, minimum=1)
    output_length = _int_field(obj, "output_length", where, minimum=0)
    if "hash_ids" not in obj:
        raise TraceError(f"{where}: missing field 'hash_ids'")
    ids = obj["hash_ids"]
    if not isinstance(ids, list) or not ids:
        raise TraceError(f"{where}: 'hash_ids' must be a non-empty list of integers, got {ids!r}")
    for position, item in enumerate(ids):
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise TraceError(f"{where}: hash_ids[{position}] must be a non-negative integer, got {item!r}")
    low, high = (len(ids) - 1) * block_tokens, len(ids) * block_tokens
    if not low < input_length <= high:
        raise TraceError(
            f"{where}: input_length {input_length} does not fit {len(ids)} blocks of {block_tokens} tokens "
            f"(expected {low + 1}..{high})"
        )
    return TraceRequest(index, line, float(stamp), input_length, output_length, tuple(ids))


def parse_trace(
    lines: Iterable[str], *, source: str = "<trace>", block_tokens: int = 512, limit: int | None = None
) -> Iterator[TraceRequest]:
    """Parse trace lines, raising :class:`TraceError` (``source:line: reason``) at the first bad one."""
    index = 0
    for number, text in enumerate(lines, start=1):
        if limit is not None and index >= limit:
            return
        if not text.strip():
            continue
        yield _parse_line(text, index, number, f"{source}:{number}", block_tokens)
        index += 1


def read_trace(path: str | Path, *, block_tokens: int = 512, limit: int | None = None) -> list[TraceRequest]:
    """All requests of the trace file at ``path`` (the first ``limit`` when given)."""
    file = Path(path)
    try:
        with file.open(encoding="utf-8") as handle:
            return list(parse_trace(handle, source=str(file), block_tokens=block_tokens, limit=limit))
    except OSError as exc:
        raise TraceError(f"{file}: cannot read the trace ({exc.strerror})") from None
