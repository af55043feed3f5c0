"""Skips that count: --require, --fail-on-skip, --profile strict; conformance targets; the --help path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_conformance.hooks import ConformanceHooks, as_hooks, find_hooks
from hicache_storage_conformance.skips import SkipPolicy, parse_policy
from test_conformance_cli import REFERENCE, REFERENCE_HOOKS, run_cli

from hicache_storage import ConfigError

#: The file backend by module path: found without the conformance hooks its entry point registers.
HOOKLESS_FILE = "hicache_storage_file:FileBackend"


def test_policy_rules() -> None:
    strict = SkipPolicy("strict")
    assert strict.violation("eviction", "capability") is None
    assert strict.violation("lifecycle", "surface") is None
    assert "strict profile" in str(strict.violation("faults", "hook"))
    assert strict.violation("eviction", "unobserved") is not None
    assert SkipPolicy(require=("faults",)).violation("faults", "capability") is not None
    assert SkipPolicy(require=("faults",)).violation("eviction", "hook") is None
    assert SkipPolicy(fail_on_skip=True).violation("eviction", "capability") is not None
    assert not SkipPolicy().active and SkipPolicy("strict").active
    assert parse_policy(None, ["faults,integrity", "faults"], False).require == ("faults", "integrity")
    with pytest.raises(ConfigError, match="unknown categories"):
        parse_policy("strict", ["nonsense"], False)
    with pytest.raises(ConfigError, match="unknown profile"):
        SkipPolicy("lenient")


def test_strict_fails_a_skip_for_a_missing_hook(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    # by module path, the file backend comes without the outage hooks its entry point registers
    done = run_cli(
        HOOKLESS_FILE,
        "--config",
        '{"path": "{tmp}/p"}',
        "--only",
        "faults",
        "--profile",
        "strict",
        "--json",
        str(report),
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "skip policy (profile strict): FAILED" in done.stdout
    assert "faults/server_stopped_then_restarted" in done.stdout
    data = json.loads(report.read_text())
    assert data["summary"]["failed"] == 0 and data["summary"]["skipped"] == 1
    assert data["policy"]["ok"] is False and data["policy"]["profile"] == "strict"
    assert [v["test"] for v in data["policy"]["violations"]] == ["faults/server_stopped_then_restarted"]
    reason = data["skipped_categories"]["faults"]["reasons"][0]
    assert reason["kind"] == "hook" and "stop_server(backend)/start_server(backend)" in reason["enable"]


def test_strict_accepts_skips_for_undeclared_capabilities() -> None:
    only = "eviction,zero_copy,faults,integrity"
    done = run_cli(REFERENCE, "--only", only, "--profile", "strict", "--hooks", REFERENCE_HOOKS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "skip policy" in done.stdout and "FAILED" not in done.stdout


def test_require_and_fail_on_skip() -> None:
    required = run_cli(REFERENCE, "--only", "eviction,lifecycle", "--require", "eviction")
    assert required.returncode == 1
    assert "category eviction is required" in required.stdout
    assert run_cli(REFERENCE, "--only", "lifecycle", "--require", "lifecycle").returncode == 0
    any_skip = run_cli(REFERENCE, "--only", "zero_copy", "--fail-on-skip")
    assert any_skip.returncode == 1 and "fail-on-skip" in any_skip.stdout
    left_out = run_cli(REFERENCE, "--only", "lifecycle", "--require", "faults")
    assert left_out.returncode == 2 and "--only leaves them out" in left_out.stderr


class PlainHooks:
    """Hooks on a plain class (no base class): raw_store only."""

    def raw_store(self, backend: Any) -> dict[str, bytes]:
        return {"k": b"v"}


def test_hooks_from_plain_objects_paths_and_entry_points() -> None:
    plain = as_hooks(PlainHooks)
    assert plain.read_stored(object(), "k") == b"v"
    assert "PlainHooks (raw_store)" in plain.describe()
    with pytest.raises(Exception, match="no fault hook"):
        plain.stop_server(object())
    assert isinstance(as_hooks("test_conformance_policy:PlainHooks"), ConformanceHooks)
    found, source = find_hooks("example")
    assert source == "entry point hicache_storage.conformance_hooks:example", source
    assert "ExampleHooks (raw_store, stop_server, start_server)" in found.describe()
    assert find_hooks("sim")[1] == "entry point hicache_storage.conformance_hooks:sim"
    assert find_hooks("hicache_storage_conformance.reference:MemoryBackend")[1] == "none"


def test_hooks_from_the_hooks_option() -> None:
    done = run_cli("example", "--only", "faults,integrity", "--hooks", "test_conformance_policy:PlainHooks")
    assert "PlainHooks (raw_store)" in done.stdout
    assert "no way to stop the server" in done.stdout  # PlainHooks has no fault hook, and --hooks wins
    bad = run_cli(REFERENCE, "--hooks", "no_such_module:Hooks")
    assert bad.returncode == 2 and "cannot import conformance hooks" in bad.stderr


def test_help_through_the_main_cli_matches_the_suite() -> None:
    bin_dir = Path(sys.executable).parent
    main = subprocess.run(
        [str(bin_dir / "hicache-storage"), "conformance", "--help"], check=False, capture_output=True, text=True
    )
    own = subprocess.run(
        [str(bin_dir / "hicache-storage-conformance"), "--help"], check=False, capture_output=True, text=True
    )
    assert main.returncode == 0 and own.returncode == 0, main.stderr
    assert main.stdout == own.stdout
    for option in ("--profile", "--require", "--fail-on-skip", "--hooks", "--only"):
        assert option in main.stdout
