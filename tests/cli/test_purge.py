"""``purge``: whole key spaces by model, namespace or prefix, or pages by age; empty filters refused,
foreign manifests ignored, "nothing matched" said with exit status 1, ``--json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from operate_support import LISTING, SPACES, cli, fill, options_for, plant_manifest, read_back, store_contents

from hicache_storage import load_backend, make_config
from hicache_storage.cli.operate import usage_of
from hicache_storage.cli.purge import parse_age


@pytest.fixture(params=LISTING)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return request.param, options_for(request.param, tmp_path)


def models_left(name: str, options: dict[str, Any]) -> set[tuple[str, str]]:
    with load_backend(name, make_config("x", extra_config=options)) as storage:
        return {(s.manifest.model_name, s.manifest.model_revision) for s in usage_of(storage) if s.manifest}


def test_purge_by_model_removes_exactly_one_key_space(store: tuple[str, dict[str, Any]], capsys: Any) -> None:
    name, options = store
    written = fill(name, options)
    config = json.dumps(options)
    assert cli("purge", name, "--config", config, "--model", "model-a", "--dry-run") == 0
    assert "4 records would be removed; nothing was removed" in capsys.readouterr().out
    for space, (keys, pages) in written.items():  # a dry run removes nothing
        assert read_back(name, options, space, keys) == pages
    assert cli("purge", name, "--config", config, "--model", "model-a", "--yes") == 0
    assert "removed 4 of 4 records" in capsys.readouterr().out  # 3 pages + the manifest
    for space, (keys, pages) in written.items():
        expected = [None] * len(keys) if space[0] == "model-a" else pages
        assert read_back(name, options, space, keys) == expected
    assert cli("purge", name, "--config", config, "--model", "model-b", "--revision", "r2", "--yes") == 0
    assert models_left(name, options) == {("model-b", "r1")}


def test_purge_by_namespace_and_by_age(store: tuple[str, dict[str, Any]]) -> None:
    name, options = store
    written = fill(name, options)
    config = json.dumps(options)
    assert cli("purge", name, "--config", config, "--namespace", "tenant-x", "--yes") == 0
    assert read_back(name, options, SPACES[2], written[SPACES[2]][0]) == [None] * 5
    assert read_back(name, options, SPACES[1], written[SPACES[1]][0]) == written[SPACES[1]][1]
    assert cli("purge", name, "--config", config, "--older-than", "1d", "--yes") == 1  # nothing is that old
    assert read_back(name, options, SPACES[0], written[SPACES[0]][0]) == written[SPACES[0]][1]


@pytest.mark.parametrize(
    "filters",
    [
        ["--namespace", ""],
        ["--model", " "],
        ["--prefix", ""],
        ["--older-than", ""],
        ["--model", "model-a", "--revision", ""],
    ],
)
def test_empty_filter_values_are_refused(tmp_path: Path, capsys: Any, filters: list[str]) -> None:
    """``--namespace "$NS"`` with ``NS`` unset would otherwise select the default namespace of every model."""
    options = options_for("file", tmp_path)
    fill("file", options)
    before = store_contents("file", options)
    assert cli("purge", "file", "--config", json.dumps(options), *filters, "--yes") == 2
    err = capsys.readouterr().err
    assert "empty value" in err and len(err.strip().splitlines()) == 1
    assert store_contents("file", options) == before


def test_nothing_matched_is_said_and_fails_with_yes(store: tuple[str, dict[str, Any]], capsys: Any) -> None:
    name, options = store
    fill(name, options)
    before = store_contents(name, options)
    config = json.dumps(options)
    assert cli("purge", name, "--config", config, "--model", "model-z", "--yes") == 1
    err = capsys.readouterr().err
    assert "nothing matched" in err and "model 'model-z'" in err
    assert cli("purge", name, "--config", config, "--namespace", "tenant-q", "--dry-run", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["nothing_matched"] is True and report["matched"] == [] and report["removed"] == 0
    assert store_contents(name, options) == before


def test_purge_json_reports_what_matched_and_was_removed(tmp_path: Path, capsys: Any) -> None:
    options = options_for("file", tmp_path)
    fill("file", options)
    config = json.dumps(options)
    assert cli("purge", "file", "--config", config, "--model", "model-b", "--dry-run", "--json") == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] is True and dry["removed"] == 0 and dry["records"] == 4 + 1 + 5 + 1
    assert sorted(row["revision"] for row in dry["matched"]) == ["r1", "r2"]
    assert cli("purge", "file", "--config", config, "--model", "model-b", "--yes", "--json") == 0
    done = json.loads(capsys.readouterr().out)
    assert done["removed"] == done["records"] == 11 and done["filter"] == {"model": "model-b"}
    assert cli("purge", "file", "--config", config, "--model", "model-a", "--json") == 2  # a question would mix in
    assert "--json" in capsys.readouterr().err


def test_a_foreign_manifest_never_makes_purge_remove_its_key_space(tmp_path: Path) -> None:
    """A manifest stored in model-c's key space that names model-b's: purging model-b leaves model-c's pages."""
    options = options_for("file", tmp_path)
    fill("file", options)
    with load_backend("file", make_config("x", extra_config=options)) as storage:
        named = [s.manifest for s in usage_of(storage) if s.manifest and s.manifest.model_name == "model-b"]
    _host, keys, pages = plant_manifest("file", options, "model-c", named[0])
    assert cli("purge", "file", "--config", json.dumps(options), "--model", "model-b", "--yes") == 0
    assert read_back("file", options, ("model-c", "", ""), keys) == pages
    assert models_left("file", options) == {("model-a", "r1")}


def test_purge_needs_one_filter_and_asks_first(tmp_path: Path, capsys: Any) -> None:
    config = json.dumps(options_for("file", tmp_path))
    assert cli("purge", "file", "--config", config) == 2
    assert "exactly one of" in capsys.readouterr().err
    fill("file", options_for("file", tmp_path))
    assert cli("purge", "file", "--config", config, "--model", "model-a") == 2  # no terminal, no --yes
    assert "--yes" in capsys.readouterr().err
    assert cli("purge", "file", "--config", config, "--prefix", "hc1-nothex.") == 2
    assert "key-space prefix" in capsys.readouterr().err


def test_purge_on_a_backend_that_cannot_list_is_one_line(capsys: Any) -> None:
    options = {"master_server_address": "127.0.0.1:1"}  # refused before any connection is tried
    assert cli("purge", "mooncake", "--config", json.dumps(options), "--model", "m", "--yes") == 2
    err = capsys.readouterr().err
    assert "the mooncake backend cannot list what it stores" in err and len(err.strip().splitlines()) == 1


def test_ages() -> None:
    assert parse_age("90s") == 90 and parse_age("12h") == 43200 and parse_age("1.5d") == 129600
    with pytest.raises(ValueError, match=r"e\.g\. 1d"):
        parse_age("yesterday")


def test_age_purges_skip_pinned_key_spaces(tmp_path: Path) -> None:
    from hicache_storage import testing as kit

    options = options_for("sim", tmp_path)
    pool = kit.make_pool()
    for model, pinned in (("system-prompts", True), ("chat", False)):
        with load_backend("sim", make_config(model, extra_config={**options, "pinned": pinned})) as storage:
            storage.register_mem_pool_host(pool)
            storage.batch_set_v1(kit.random_keys(2), kit.page_indices(0, 2))
    assert cli("purge", "sim", "--config", json.dumps(options), "--older-than", "0s", "--yes") == 0
    assert {model for model, _revision in models_left("sim", options)} == {"system-prompts"}
