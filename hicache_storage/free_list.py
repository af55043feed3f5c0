"""Numbered units handed out with an owner tag and taken back only while handed out.

The one allocator behind the host KV pool, the state pool, the device pools and the pipeline's
host-unit arenas: each keeps its own unit size, index checks and lock around a :class:`FreeList`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import HostPoolError

__all__ = ["FreeList"]


class FreeList:
    """Units ``0 .. count - 1``, each free or held by an owner.

    :meth:`alloc` hands out units in ascending order when the free list allows it (a fresh list
    gives 0, 1, 2, ...; each :meth:`release` makes its units the next to go, in the order given).
    :meth:`release` refuses, changing nothing, a unit that is not held or is named twice. Not
    thread-safe: a pool that threads share holds its own lock around the calls. ``noun`` (plural)
    names the units in error messages.
    """

    __slots__ = ("_free", "count", "noun", "owners")

    def __init__(self, count: int, noun: str = "pages") -> None:
        self.count = count
        self.noun = noun
        self._free: list[int] = list(range(count - 1, -1, -1))
        #: Unit → owner of every held unit (read it; change it only through the methods).
        self.owners: dict[int, object] = {}

    @property
    def free(self) -> int:
        """Units not held."""
        return len(self._free)

    @property
    def used(self) -> int:
        """Units held."""
        return len(self.owners)

    def alloc(self, count: int, owner: object = None) -> list[int] | None:
        """``count`` free units, now held by ``owner``; ``None`` (nothing taken) when fewer are free."""
        free = self._free
        left = len(free) - count
        if left < 0:
            return None
        if count < 0:
            raise HostPoolError(f"cannot take {count} {self.noun}: expected a count >= 0")
        units = free[: left - 1 : -1] if left else free[::-1]
        del free[left:]
        self.owners.update(dict.fromkeys(units, owner))
        return units

    def release(self, units: Sequence[int]) -> None:
        """Free held ``units``; a unit not held, or named twice, raises :class:`HostPoolError` and frees nothing."""
        owners = self.owners
        named = set(units)
        if len(named) != len(units):
            raise HostPoolError(f"free(): {self.noun} {list(units)} name the same unit twice in one call")
        if not owners.keys() >= named:
            unowned = [unit for unit in units if unit not in owners]
            raise HostPoolError(f"free(): {self.noun} {unowned} are already free or never allocated (double free?)")
        for unit in units:
            del owners[unit]
        self._free.extend(reversed(units))

    def owner(self, unit: int, what: str) -> object:
        """Owner of held ``unit``; raises :class:`HostPoolError` (``what`` is not allocated) when it is free."""
        try:
            return self.owners[unit]
        except KeyError:
            raise HostPoolError(f"{what} is not allocated") from None

    def unheld(self, units: Sequence[int]) -> list[int]:
        """Those of ``units`` that are not held."""
        owners = self.owners
        return [unit for unit in units if unit not in owners]

    def reset(self) -> None:
        """Free every unit."""
        self.owners.clear()
        self._free[:] = range(self.count - 1, -1, -1)

    def problems(self) -> str | None:
        """What is wrong with the accounting (``None`` when nothing is): a unit both free and held, or lost."""
        if len(self._free) + len(self.owners) != self.count or not self.owners.keys().isdisjoint(self._free):
            return f"{len(self._free)} free + {len(self.owners)} handed out != {self.count} {self.noun}"
        return None
