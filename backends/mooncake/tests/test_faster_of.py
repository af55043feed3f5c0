"""Choosing the cheaper of two ways of a call from measured costs (no server needed)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from hicache_storage_mooncake.faster_of import FasterOf


def test_the_ways_take_turns_until_each_has_its_samples() -> None:
    chooser = FasterOf(("a", "b"), warmup=2)
    picks = []
    for _ in range(4):
        way = chooser.pick()
        picks.append(way)
        chooser.record(way, 1.0 if way == "a" else 2.0, 1)
    assert picks == ["a", "b", "a", "b"]


def test_the_cheaper_way_runs_and_the_other_is_probed() -> None:
    chooser = FasterOf(("a", "b"), warmup=1, probe_every=4)
    for way, seconds in (("a", 3.0), ("b", 1.0)):
        assert chooser.pick() == way
        chooser.record(way, seconds, 1)
    picks = [chooser.pick() for _ in range(8)]  # calls 3..10: every 4th is the probe
    assert picks == ["b", "a", "b", "b", "b", "a", "b", "b"]


def test_a_change_of_conditions_turns_the_choice() -> None:
    chooser = FasterOf(("a", "b"), warmup=1, probe_every=2, weight=0.5)
    chooser.record("a", 1.0, 1)
    chooser.record("b", 2.0, 1)
    for _ in range(6):  # "a" becomes slow: its samples pull its mean up past "b"
        chooser.record("a", 5.0, 1)
    assert chooser.costs()["a"] == pytest.approx(5.0 - 4.0 / 64) and chooser.costs()["b"] == 2.0
    assert [chooser.pick() for _ in range(2)] == ["b", "a"]  # call 1 takes "b", call 2 probes "a"


def test_costs_are_per_unit_and_empty_calls_are_not_recorded() -> None:
    chooser = FasterOf(("a", "b"))
    chooser.record("a", 2.0, 4)
    chooser.record("b", 5.0, 0)
    chooser.record("b", -1.0, 3)
    assert chooser.costs() == {"a": 0.5, "b": None}


def test_concurrent_picks_and_records_keep_every_sample() -> None:
    chooser = FasterOf(("a", "b"), warmup=1000)

    def call(_: int) -> None:
        way = chooser.pick()
        chooser.record(way, 1.0, 1)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(400)))
    assert chooser.costs() == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize(
    ("ways", "options"),
    [(("a", "a"), {}), (("a", "b"), {"warmup": 0}), (("a", "b"), {"probe_every": 1}), (("a", "b"), {"weight": 0})],
)
def test_bad_settings_are_refused(ways: tuple[str, str], options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        FasterOf(ways, **options)  # type: ignore[arg-type]
