"""In-flight write holds: counts per hash, whole spans added and removed at a time."""

from __future__ import annotations

from hicache_storage.pipeline.inflight import InFlight


def test_spans_held_once_come_and_go_together() -> None:
    held = InFlight()
    held.add(["a", "b", "c"])
    assert "b" in held and len(held) == 3 and held.count("c") == 1 and held.count("z") == 0
    held.remove(["a", "b", "c"])
    assert not held and "a" not in held


def test_overlapping_spans_count_each_hold() -> None:
    held = InFlight()
    held.add(["a", "b"])
    held.add(["b", "c"])
    assert held.count("b") == 2 and len(held) == 3
    held.remove(["a", "b"])
    assert held.count("b") == 1 and "a" not in held and "c" in held
    held.remove(["b", "c"])
    assert not held


def test_a_hash_listed_twice_holds_twice() -> None:
    held = InFlight()
    held.add(["a", "b", "a"])
    assert held.count("a") == 2 and held.count("b") == 1
    held.remove(["a"])
    assert held.count("a") == 1
    held.remove(["a", "b"])
    assert not held
