from __future__ import annotations

from pathlib import Path

import pytest

from hicache_storage.replay.trace import TraceError, parse_trace, read_trace

GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'


def parse(lines: list[str]) -> list[object]:
    return list(parse_trace(lines, source="t.jsonl"))


def test_parses_requests_and_skips_blank_lines() -> None:
    requests = parse([GOOD, "", GOOD.replace("[0, 1]", "[0, 2]")])
    assert [r.hash_ids for r in requests] == [(0, 1), (0, 2)]  # type: ignore[attr-defined]
    assert [r.line for r in requests] == [1, 3]  # type: ignore[attr-defined]


def test_limit_stops_early() -> None:
    assert len(list(parse_trace([GOOD] * 5, limit=2))) == 2


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"input_length": 600, "output_length": 5, "hash_ids": [0, 1]}', "missing field 'timestamp'"),
        (GOOD.replace('"input_length": 600', '"input_length": "600"'), "'input_length' must be an integer"),
        (GOOD.replace('"hash_ids": [0, 1]', '"hash_ids": []'), "'hash_ids' must be a non-empty list"),
        (GOOD.replace("[0, 1]", "[0, -1]"), "hash_ids[1] must be a non-negative integer"),
        (GOOD.replace("600", "2000"), "input_length 2000 does not fit 2 blocks of 512 tokens"),
        (GOOD.replace('"timestamp": 0', '"timestamp": -4'), "'timestamp' must be a non-negative number"),
    ],
)
def test_malformed_line_names_line_number_and_reason(line: str, reason: str) -> None:
    with pytest.raises(TraceError) as info:
        parse([GOOD, GOOD, line])
    assert str(info.value).startswith("t.jsonl:3: ")
    assert reason in str(info.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(tmp_path / "absent.jsonl")
