"""Numbered units handed out with an owner tag and taken back only while handed out.

The one allocator behind the host KV pool, the state pool, the device pools and the pipeline's
host-unit arenas: each keeps its own unit size, index checks and lock around a :class:`FreeList`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from .errors import HostPoolError

__all__ = ["FreeList"]

#: Below this many units a call marks them one by one (cheaper than checking for a run).
_FEW = 8


class FreeList:
    """Units ``0 .. count - 1``, each free or held by an owner.

    :meth:`alloc` hands out units in ascending order when the free list allows it (a fresh list
    gives 0, 1, 2, ...; each :meth:`release` makes its units the next to go, in the order given).
    :meth:`release` refuses, changing nothing, a unit that is not held or is named twice. Units
    handed out and taken back as one consecutive run (the usual case) are marked in one slice
    operation. Not thread-safe: a pool that threads share holds its own lock around the calls.
    ``noun`` (plural) names the units in error messages.
    """

    __slots__ = ("_free", "_held", "_owner", "count", "noun", "used")

    def __init__(self, count: int, noun: str = "pages") -> None:
        self.count = count
        self.noun = noun
        self._free: list[int] = list(range(count - 1, -1, -1))
        self._held = bytearray(count)  # 1 where a unit is held
        self._owner: list[object] = [None] * count  # its owner (stale where not held)
        #: Units held.
        self.used = 0

    @property
    def free(self) -> int:
        """Units not held."""
        return len(self._free)

    @property
    def owners(self) -> dict[int, object]:
        """Unit → owner of every held unit (a snapshot)."""
        owner = self._owner
        return {unit: owner[unit] for unit, held in enumerate(self._held) if held}

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
        if count < _FEW or not _is_run(units):
            held, owners = self._held, self._owner
            for unit in units:
                held[unit] = 1
                owners[unit] = owner
        else:
            first = units[0]
            self._held[first : first + count] = b"\x01" * count
            self._owner[first : first + count] = [owner] * count
        self.used += count
        return units

    def release(self, units: Sequence[int]) -> None:
        """Free held ``units``; a unit not held, or named twice, raises :class:`HostPoolError` and frees nothing."""
        count = len(units)
        held = self._held
        if count >= _FEW and _is_run(units):  # distinct by construction
            first = units[0]
            if first < 0 or first + count > self.count or 0 in held[first : first + count]:
                self._refuse(units)
            held[first : first + count] = bytes(count)
            self._owner[first : first + count] = [None] * count
        else:
            size = self.count
            if count > 1 and len(set(units)) != count:
                self._refuse(units)
            for unit in units:
                if not 0 <= unit < size or not held[unit]:
                    self._refuse(units)
            owners = self._owner
            for unit in units:
                held[unit] = 0
                owners[unit] = None
        self.used -= count
        self._free.extend(reversed(units))

    def _refuse(self, units: Sequence[int]) -> NoReturn:
        if len(set(units)) != len(units):
            raise HostPoolError(f"free(): {self.noun} {list(units)} name the same unit twice in one call")
        unowned = self.unheld(units)
        raise HostPoolError(f"free(): {self.noun} {unowned} are already free or never allocated (double free?)")

    def owner(self, unit: int, what: str) -> object:
        """Owner of held ``unit``; raises :class:`HostPoolError` (``what`` is not allocated) when it is free."""
        if not 0 <= unit < self.count or not self._held[unit]:
            raise HostPoolError(f"{what} is not allocated")
        return self._owner[unit]

    def unheld(self, units: Sequence[int]) -> list[int]:
        """Those of ``units`` that are not held (a unit outside ``0 .. count - 1`` is not held)."""
        held, count = self._held, self.count
        return [unit for unit in units if not 0 <= unit < count or not held[unit]]

    def reset(self) -> None:
        """Free every unit."""
        self._held[:] = bytes(self.count)
        self._owner[:] = [None] * self.count
        self._free[:] = range(self.count - 1, -1, -1)
        self.used = 0

    def problems(self) -> str | None:
        """What is wrong with the accounting (``None`` when nothing is): a unit both free and held, or lost."""
        held = self._held
        if len(self._free) + self.used != self.count or held.count(1) != self.used or any(held[u] for u in self._free):
            return f"{len(self._free)} free + {self.used} handed out != {self.count} {self.noun}"
        return None


def _is_run(units: Sequence[int]) -> bool:
    """Whether ``units`` count up by one from the first (a non-empty list)."""
    first = units[0]
    return units[-1] - first == len(units) - 1 and list(units) == list(range(first, first + len(units)))
