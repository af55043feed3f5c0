"""Per-item values computed ahead of their use on a helper thread, without ever waiting for it.

A backend that writes pages one after another needs each page's header (and so its checksum) just
before sending it. :class:`Lookahead` lets a helper thread compute the values of later items while
the caller sends earlier ones. When the caller reaches an item the helper has not started, the
caller computes that value itself instead of waiting, so a machine with no free core loses nothing
to thread hand-offs and one with a free core overlaps the work fully. Values are claimed in
order, by whichever thread comes first, and each is computed exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar

__all__ = ["Lookahead"]

Item = TypeVar("Item")
Value = TypeVar("Value")

_PENDING = object()


class Lookahead(Generic[Item, Value]):
    """``func(items[i])`` for every ``i``, read in order with :meth:`get`; call :meth:`close` when done.

    With ``executor=None`` (or fewer than two items) every value is computed by :meth:`get`. An
    exception raised by ``func`` is raised by the :meth:`get` of that item. After :meth:`close`
    returns, ``func`` is running nowhere, so the items' memory may be reused.
    """

    def __init__(self, func: Callable[[Item], Value], items: Sequence[Item], executor: Executor | None) -> None:
        self._func = func
        self._items = items
        self._values: list[object] = [_PENDING] * len(items)
        self._errors: dict[int, BaseException] = {}
        self._claimed = 0  # items [0, _claimed) are being or have been computed
        self._done = threading.Condition()
        self._helper: Future[None] | None = None
        if executor is not None and len(items) > 1:
            self._claimed = 1  # item 0 is the caller's: there is nothing to overlap it with
            self._helper = executor.submit(self._run_ahead)

    def _claim(self) -> int | None:
        with self._done:
            index = self._claimed
            if index >= len(self._items):
                return None
            self._claimed = index + 1
            return index

    def _compute(self, index: int) -> None:
        try:
            value: object = self._func(self._items[index])
        except BaseException as error:  # handed to the get() of this item
            with self._done:
                self._errors[index] = error
                self._values[index] = None
                self._done.notify_all()
            return
        with self._done:
            self._values[index] = value
            self._done.notify_all()

    def _run_ahead(self) -> None:
        while (index := self._claim()) is not None:
            self._compute(index)

    def get(self, index: int) -> Value:
        """The value of ``items[index]``: computed here when the helper has not claimed it yet."""
        with self._done:
            if index == 0 and self._values[0] is _PENDING and self._helper is not None:
                claim_here = True  # item 0 is always the caller's (see __init__)
            elif index >= self._claimed:
                self._claimed = index + 1  # items skipped over are never computed
                claim_here = True
            else:
                claim_here = False
                while self._values[index] is _PENDING:
                    self._done.wait()
        if claim_here:
            self._compute(index)
        with self._done:
            error = self._errors.get(index)
            value = self._values[index]
        if error is not None:
            raise error
        return value  # type: ignore[return-value]

    def advance(self) -> bool:
        """Compute the next value nobody has claimed, here; ``False`` when every value is claimed.

        For a caller with idle time before it needs later values (a send waiting on a full socket).
        """
        index = self._claim()
        if index is None:
            return False
        self._compute(index)
        return True

    def close(self) -> None:
        """Stop the helper from claiming more items and wait for the one it is computing."""
        with self._done:
            self._claimed = len(self._items)
        if self._helper is not None:
            self._helper.result()
