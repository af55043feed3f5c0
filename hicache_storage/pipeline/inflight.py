"""Page hashes with writes in flight: a multiset added to and taken from a span's hashes at a time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["InFlight"]


class InFlight:
    """How many admitted writes hold each page hash (a hash appears once per write that holds it).

    :meth:`add` and :meth:`remove` take a whole list; when no hash is held twice (the usual
    case) both are one set operation. Removing more holds than were added is a caller error and
    is ignored.
    """

    __slots__ = ("_held", "_more")

    def __init__(self) -> None:
        self._held: set[str] = set()
        #: Hash → holds beyond the first, for hashes held more than once.
        self._more: dict[str, int] = {}

    def __contains__(self, page_hash: object) -> bool:
        return page_hash in self._held

    def __len__(self) -> int:
        """Distinct hashes held."""
        return len(self._held)

    def count(self, page_hash: str) -> int:
        """Holds on ``page_hash`` (0 when none)."""
        return 1 + self._more.get(page_hash, 0) if page_hash in self._held else 0

    def add(self, hashes: Sequence[str]) -> None:
        """One more hold on each of ``hashes`` (a hash listed twice gets two)."""
        held = self._held
        if held.isdisjoint(hashes):
            before = len(held)
            held.update(hashes)
            if len(held) - before == len(hashes):
                return
            repeats = Counter(hashes)  # hashes listed more than once: held once already, count the rest
            for page_hash, times in repeats.items():
                if times > 1:
                    self._more[page_hash] = self._more.get(page_hash, 0) + times - 1
            return
        more = self._more
        for page_hash in hashes:
            if page_hash in held:
                more[page_hash] = more.get(page_hash, 0) + 1
            else:
                held.add(page_hash)

    def remove(self, hashes: Sequence[str]) -> None:
        """One hold less on each of ``hashes``; a hash with none left is no longer held."""
        more = self._more
        if not more:
            self._held.difference_update(hashes)
            return
        for page_hash in hashes:
            extra = more.get(page_hash)
            if extra is None:
                self._held.discard(page_hash)
            elif extra == 1:
                del more[page_hash]
            else:
                more[page_hash] = extra - 1
