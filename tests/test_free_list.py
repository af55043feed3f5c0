"""The free list behind every pool allocator: order, owners, refusals that change nothing."""

from __future__ import annotations

import pytest

from hicache_storage.errors import HostPoolError
from hicache_storage.free_list import FreeList


def test_units_come_out_ascending_and_come_back_in_the_order_given() -> None:
    units = FreeList(6, "slots")
    assert units.alloc(2, "a") == [0, 1] and units.alloc(3, "b") == [2, 3, 4]
    assert units.free == 1 and units.used == 5
    units.release([2, 3])
    assert units.alloc(3, "c") == [2, 3, 5]
    assert units.owners == {0: "a", 1: "a", 2: "c", 3: "c", 4: "b", 5: "c"}
    assert units.alloc(0, "d") == [] and units.alloc(1, "d") is None
    assert units.problems() is None


def test_refusals_free_nothing() -> None:
    units = FreeList(4, "device pages")
    held = units.alloc(3, "op")
    assert held == [0, 1, 2]
    with pytest.raises(HostPoolError, match=r"device pages \[1, 1\] name the same unit twice"):
        units.release([1, 1])
    with pytest.raises(HostPoolError, match=r"device pages \[3\] are already free .*double free"):
        units.release([0, 3])
    assert units.used == 3 and units.unheld([0, 3]) == [3]
    with pytest.raises(HostPoolError, match="cannot take -1 device pages"):
        units.alloc(-1)
    assert units.alloc(2) is None and units.free == 1


def test_owner_and_reset() -> None:
    units = FreeList(3)
    units.alloc(2, "op")
    assert units.owner(1, "page 1") == "op"
    with pytest.raises(HostPoolError, match="page 2 is not allocated"):
        units.owner(2, "page 2")
    units.reset()
    assert units.owners == {} and units.free == 3 and units.alloc(3) == [0, 1, 2]


def test_problems_name_a_unit_both_free_and_held() -> None:
    units = FreeList(2, "units")
    units.alloc(1, "op")
    units._free.append(0)  # a held unit put back on the free list behind its back
    assert units.problems() == "2 free + 1 handed out != 2 units"


def test_runs_and_scattered_units_are_refused_alike() -> None:
    units = FreeList(40, "pages")
    run = units.alloc(20, "run")
    assert run == list(range(20)) and units.owner(19, "page 19") == "run"
    with pytest.raises(HostPoolError, match=r"pages \[20\] are already free"):
        units.release(list(range(1, 21)))  # a run reaching past what is held
    with pytest.raises(HostPoolError, match=r"pages \[40\] are already free"):
        units.release([19, 40])  # outside the list
    with pytest.raises(HostPoolError, match=r"pages \[-1\] are already free"):
        units.release([-1])
    assert units.used == 20 and units.unheld([-1, 0, 40]) == [-1, 40]
    units.release(run[::2])  # scattered
    units.release(run[1::2])
    assert units.used == 0 and units.owners == {} and units.problems() is None
