"""``usage``: key spaces named by their own manifests; a backend that cannot list, or a store that does
not exist, is one line on stderr and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hicache_storage_slab.geometry import chunk_plan
from operate_support import LISTING, cli, fill, options_for, plant_manifest

from hicache_storage import load_backend, make_config
from hicache_storage.cli.operate import usage_of
from hicache_storage.plugin.page_format import HEADER_SIZE


@pytest.fixture(params=LISTING)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    return request.param, options_for(request.param, tmp_path)


def test_usage_names_each_key_space_with_its_counts(store: tuple[str, dict[str, Any]], capsys: Any) -> None:
    name, options = store
    written = fill(name, options)
    assert cli("usage", name, "--config", json.dumps(options), "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    found = {(r["model"], r["revision"], r["namespace"]): r for r in rows}
    assert set(found) == set(written)
    for space, (keys, pages) in written.items():
        row = found[space]
        assert row["pages"] == len(keys)
        if name == "slab":  # the slots the pages take (no record header: the index holds it)
            assert row["bytes"] == sum(chunk_plan(len(page), 64 << 10).stored_bytes for page in pages)
        else:
            assert row["bytes"] == sum(len(page) + HEADER_SIZE for page in pages)  # page + record header
        assert row["pool"] == "kv" and row["ranks"] == ["tp0of1.pp0of1.cp0of1"]
        assert row["first_write"] <= row["last_write"]
        assert row["foreign_manifest"] is None


def test_a_backend_that_cannot_list_is_refused_in_one_line(capsys: Any) -> None:
    options = {"master_server_address": "127.0.0.1:1"}  # refused before any connection is tried
    assert cli("usage", "mooncake", "--config", json.dumps(options)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "the mooncake backend cannot list what it stores" in err and "supports_list" in err


FILE = {"path": "{missing}"}
SLAB = {"path": "{missing}", "capacity_bytes": 8 << 20}


@pytest.mark.parametrize(
    ("command", "backend", "options"),
    [
        (["usage"], "file", FILE),
        (["purge", "--model", "m", "--yes"], "file", FILE),
        (["health"], "file", FILE),
        (["metrics"], "file", FILE),
        (["health"], "slab", SLAB),
        (["usage"], "fsspec", {"url": "file://{missing}"}),
    ],
)
def test_no_command_creates_a_store_that_does_not_exist(
    tmp_path: Path, capsys: Any, command: list[str], backend: str, options: dict[str, Any]
) -> None:
    missing = tmp_path / "mistyped" / "hicache"
    config = {k: v.replace("{missing}", str(missing)) if isinstance(v, str) else v for k, v in options.items()}
    assert cli(command[0], backend, "--config", json.dumps(config), *command[1:]) == 2
    err = capsys.readouterr().err
    assert f"no store at '{missing}'" in err and f"{command[0]} never creates a store" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "mistyped").exists()


def test_a_manifest_naming_another_key_space_is_not_trusted(tmp_path: Path, capsys: Any) -> None:
    options = options_for("file", tmp_path)
    fill("file", options)
    with load_backend("file", make_config("x", extra_config=options)) as storage:
        model_b = next(s.manifest for s in usage_of(storage) if s.manifest and s.manifest.model_name == "model-b")
    assert model_b is not None
    host, _keys, _pages = plant_manifest("file", options, "model-c", model_b)  # model-c's manifest names model-b
    assert cli("usage", "file", "--config", json.dumps(options), "--json") == 0
    rows = {row["prefix"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[host]["model"] is None and rows[host]["foreign_manifest"] == model_b.prefix
    assert cli("usage", "file", "--config", json.dumps(options)) == 0
    assert f"{host}: its manifest names another key space" in capsys.readouterr().out
