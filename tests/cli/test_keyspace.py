"""``hicache-storage keyspace``: which deployments share pages, from their configuration alone."""

from __future__ import annotations

import json

import pytest

from hicache_storage.cli.commands import run


def keyspace(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, str]:
    assert run(["keyspace", "--model", "m", "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_tp2_and_tp4_with_one_lcm_print_one_prefix(capsys):
    tp2 = keyspace(capsys, "--tp-size", "2", "--tp-lcm-size", "4")
    tp4 = keyspace(capsys, "--tp-size", "4", "--tp-rank", "3", "--tp-lcm-size", "4", "--layout", "page_head")
    assert tp2["prefix"] == tp4["prefix"]
    assert tp2["records"] == "head shards 0..1 of 4" and tp4["records"] == "head shards 3..3 of 4"
    assert tp4["example_key"].endswith(".h3of4.pp0of1.cp0of1")


def test_another_lcm_or_none_prints_another_prefix(capsys):
    base = keyspace(capsys, "--tp-size", "2", "--tp-lcm-size", "4")["prefix"]
    assert keyspace(capsys, "--tp-size", "2", "--tp-lcm-size", "8")["prefix"] != base
    local = keyspace(capsys, "--tp-size", "2")
    assert local["prefix"] != base and "tp0of2" in local["records"]


def test_bad_geometry_is_a_usage_error(capsys):
    assert run(["keyspace", "--model", "m", "--kv-heads", "6", "--tp-size", "3", "--tp-lcm-size", "4"]) == 2
    assert "tp_size=3 does not divide tp_lcm_size=4" in capsys.readouterr().err.replace("\n", " ")
