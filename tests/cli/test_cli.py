"""The ``hicache-storage`` command: backends, demo, error handling."""

import json

import pytest

from hicache_storage import API_VERSION
from hicache_storage.cli.commands import parse_json_option, run
from hicache_storage.cli.demo import run_demo
from hicache_storage.cli.demo_hybrid import run_hybrid_demo
from hicache_storage.errors import ConfigError


def test_backends_json_lists_our_plugins(capsys):
    assert run(["backends", "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert {"file", "sim"} <= set(rows)
    assert rows["sim"]["distribution"] == "hicache-storage-sim"
    assert rows["file"]["api_version"] == API_VERSION
    assert rows["file"]["capabilities"]["verifies_integrity"] is True
    assert rows["file"]["error"] is None


def test_demo_verifies_every_page(tmp_path, capsys):
    out = tmp_path / "demo.json"
    assert run(["demo", "--pages", "96", "--batch", "32", "--path", str(tmp_path / "store"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    results = [r for r in rows if r["kind"] == "kv"]
    assert [r["backend"] for r in results] == ["file", "sim"]
    assert all(r["exact"] == r["pages"] == 96 and r["ok"] for r in results)
    hybrid = [r for r in rows if r["kind"] == "hybrid"]
    assert [r["backend"] for r in hybrid] == ["file", "sim"]
    for r in hybrid:
        assert r["restorable_found"] == r["restorable_expected"] == [4, 8, 12, 16, 20, 24, 28, 32]
        assert r["kv_exact"] == r["kv_pages"] and r["window_exact"] == r["window"] and r["state_exact"] and r["ok"]
    assert "PASS" in capsys.readouterr().out


def test_hybrid_demo_fails_when_bytes_do_not_come_back():
    result = run_hybrid_demo("sim", {"keys_only": True})
    assert result.restorable_found == result.restorable_expected
    assert result.kv_exact == 0 and not result.state_exact and not result.ok


def test_demo_fails_when_bytes_do_not_come_back():
    result = run_demo("sim", {"keys_only": True}, pages=8, batch=8)
    assert result.stored == result.read_back == 8
    assert result.exact == 0 and not result.ok


def test_bad_backend_and_config_are_one_clear_line(capsys):
    assert run(["demo", "--backend", "nosuch"]) == 2
    assert "no backend named 'nosuch'" in capsys.readouterr().err
    assert run(["demo", "--backend", "sim", "--config", '{"colour": 1}']) == 2
    assert "extra_config.colour: unknown option" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "message"),
    [("[1]", "expected a JSON object"), ("{bad", "not valid JSON"), ("@/no/such/file", "cannot read")],
)
def test_config_option_errors(value, message):
    with pytest.raises(ConfigError, match=message):
        parse_json_option(value)


def test_config_option_from_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"path": "/x"}')
    assert parse_json_option(f"@{path}") == {"path": "/x"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["usage", "sim", "--jsno"], "unknown option --jsno (did you mean --json?)"),
        (["purge", "sim", "--modle", "m"], "unknown option --modle (did you mean --model?) (see hicache-storage purge"),
        (["health", "sim", "extra"], "unexpected argument 'extra'"),
        (["usag", "sim"], "invalid choice: 'usag'"),
        (["replay", "t.jsonl", "--device-tokens", "0"], "--device-tokens: expected a positive integer, got 0"),
    ],
)
def test_bad_arguments_are_one_line_with_the_closest_name(argv, message, capsys):
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not err.startswith("usage:")


def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        run(["health", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "seconds before the store counts as unhealthy (default: 10.0)" in text
    with pytest.raises(SystemExit):
        run(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1048576)" in text and "tokens per page (must divide --block-tokens) (default: 64)" in text
    assert "(default: None)" not in text and "(default: False)" not in text
