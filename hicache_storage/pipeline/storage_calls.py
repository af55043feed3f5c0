"""Storage calls the way SGLang's engine makes them: batches of at most N pages, stop at the first miss.

No method raises for a backend problem: an exception from the backend (a contract breach, since
batch calls must not raise) counts as a miss or a failed write and is counted in ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

from ..contract import HiCacheStorage
from ..pools import PoolHitPolicy, PoolName, PoolTransfer, pool_name_str
from .components.base import Component
from .staging import token_indices

__all__ = ["MultiPoolCalls", "PoolPart", "Restorable", "StorageCalls"]


class StorageCalls:
    """Chunked, fault-tolerant calls to ``storage`` for one host pool's pages."""

    def __init__(self, storage: HiCacheStorage, page_size: int, batch_pages: int) -> None:
        self.storage = storage
        self.page_size = page_size
        self.batch_pages = batch_pages
        self.errors = 0

    def leading_hits(self, hashes: Sequence[str]) -> int:
        """Length of the run of stored pages at the start of ``hashes`` (``batch_exists`` per batch)."""
        hit = 0
        for begin in range(0, len(hashes), self.batch_pages):
            chunk = list(hashes[begin : begin + self.batch_pages])
            try:
                found = int(self.storage.batch_exists(chunk))
            except Exception:
                self.errors += 1
                found = 0
            hit += max(0, min(found, len(chunk)))
            if found < len(chunk):
                break
        return hit

    def write_each(self, hashes: Sequence[str], host_pages: Sequence[int]) -> list[bool]:
        """Write pages from host slots, every batch of ``batch_pages`` whatever the others answer; a flag per page.

        A page whose batch raised or answered out of shape reads ``False``. A hash listed twice is
        written once (from its first slot) and both entries get its flag.
        """
        if len(set(hashes)) == len(hashes):
            return self._each(self.storage.batch_set_v1, hashes, host_pages)
        first: dict[str, int] = {}
        keys: list[str] = []
        pages: list[int] = []
        where: list[int] = []
        for page_hash, page in zip(hashes, host_pages, strict=True):
            index = first.get(page_hash)
            if index is None:
                index = first[page_hash] = len(keys)
                keys.append(page_hash)
                pages.append(page)
            where.append(index)
        flags = self._each(self.storage.batch_set_v1, keys, pages)
        return [flags[index] for index in where]

    def read_leading(self, hashes: Sequence[str], host_pages: Sequence[int]) -> int:
        """Read pages into host slots; the length of the leading run read successfully."""
        return self._leading(self.storage.batch_get_v1, hashes, host_pages)

    def _leading(self, call: Callable[..., Any], hashes: Sequence[str], host_pages: Sequence[int]) -> int:
        done = 0
        for flags in self._batches(call, hashes, host_pages):
            if False in flags:
                return done + flags.index(False)
            done += len(flags)
        return done

    def _each(self, call: Callable[..., Any], hashes: Sequence[str], host_pages: Sequence[int]) -> list[bool]:
        out: list[bool] = []
        for flags in self._batches(call, hashes, host_pages):
            out += flags
        return out

    def _batches(
        self, call: Callable[..., Any], hashes: Sequence[str], host_pages: Sequence[int]
    ) -> Iterator[list[bool]]:
        """``call`` on each batch of ``batch_pages`` pages, lazily; a flag per page (all ``False`` if it erred)."""
        for begin in range(0, len(hashes), self.batch_pages):
            keys = list(hashes[begin : begin + self.batch_pages])
            indices = token_indices(host_pages[begin : begin + len(keys)], self.page_size)
            try:
                results = call(keys, indices)
            except Exception:
                results = None
            if not isinstance(results, list) or len(results) != len(keys):
                self.errors += 1
                yield [False] * len(keys)
            else:
                yield [ok is True for ok in results]


class PoolPart(NamedTuple):
    """One sidecar pool's share of a v2 transfer: its pool name, slots per unit, keys and host units."""

    name: str
    unit_tokens: int
    hashes: Sequence[str]
    units: Sequence[int]


class Restorable(NamedTuple):
    """What a multi-pool lookup found: all positions absolute (pages from the chain's start).

    ``kv_end``: end of the leading run of stored KV pages; ``lengths``: restorable prefix ends
    (ascending); ``boundaries``: each sidecar pool's own boundary (0 when it reported none).
    """

    kv_end: int
    lengths: list[int]
    boundaries: dict[str, int]


class MultiPoolCalls(StorageCalls):
    """:class:`StorageCalls` plus the v2 calls: sidecar writes and reads, and multi-pool lookups.

    Like the v1 calls, no method raises for a backend fault: a call that raises, or answers with
    something that is not the contract's shape, counts in ``errors`` and means misses / failures.
    """

    def restorable(self, hashes: Sequence[str], pools: Sequence[Component], *, offset: int, after: int) -> Restorable:
        """Restorable prefixes of ``hashes`` (which start at chain position ``offset``) that end beyond ``after``.

        ``batch_exists_v2`` is asked in batches of at most ``batch_pages`` new pages; each batch
        repeats the ``window - 1`` pages before it so every trailing window it judges lies inside
        the call. Stops at the first batch whose KV run comes up short. ``pools``: the sidecar
        components asked about (each by its name, hit policy and window).
        """
        overlap = max((pool.window - 1 for pool in pools if pool.policy is PoolHitPolicy.TRAILING_PAGES), default=0)
        lengths: list[int] = []
        boundaries = dict.fromkeys((pool.name for pool in pools), 0)
        begin = max(0, after - offset)  # first page whose prefix end is new
        kv_end = offset + begin
        sparse = False
        while begin < len(hashes):
            low = max(0, begin - overlap)
            chunk = list(hashes[low : begin + self.batch_pages])
            transfers = [PoolTransfer(pool.name, keys=chunk[-pool.window :], hit_policy=pool.policy) for pool in pools]
            try:
                result = self.storage.batch_exists_v2(chunk, transfers)
                kv_run, found, hits = _exists_result(result, len(chunk))
            except Exception:
                self.errors += 1
                break
            base = offset + low
            cut = begin - low
            if type(found) is range:  # every prefix 1..n: the new ones in one call
                lengths += range(base + cut + 1, base + found.stop)
            else:
                lengths += [base + length for length in found if length > cut]
                sparse = sparse or len(found) != (found[-1] if found else 0)
            for pool in pools:
                hit = hits.get(pool.name, 0)
                if hit:
                    boundaries[pool.name] = max(boundaries[pool.name], base + hit)
            kv_end = max(kv_end, base + kv_run)
            if kv_run < len(chunk):
                break
            begin = low + len(chunk)
        # Each batch adds only lengths beyond the last; a batch's list is ascending unless the backend errs.
        return Restorable(kv_end, sorted(set(lengths)) if sparse else lengths, boundaries)

    def write_units(self, parts: Sequence[PoolPart]) -> dict[str, list[bool]]:
        """Write sidecar units from host (``batch_set_v2``, all pools in one call per batch); flags per pool."""
        return self._move_units(self.storage.batch_set_v2, parts)

    def read_units(self, parts: Sequence[PoolPart]) -> dict[str, list[bool]]:
        """Read sidecar units into host (``batch_get_v2``); flags per pool (``False`` = failed)."""
        return self._move_units(self.storage.batch_get_v2, parts)

    def _move_units(self, call: Callable[..., Any], parts: Sequence[PoolPart]) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {part.name: [] for part in parts}
        longest = max((len(part.hashes) for part in parts), default=0)
        step = self.batch_pages
        for begin in range(0, longest, step):
            batch = [part for part in parts if len(part.hashes) > begin]
            transfers = [
                PoolTransfer(
                    part.name,
                    host_indices=token_indices(part.units[begin : begin + step], part.unit_tokens),
                    keys=list(part.hashes[begin : begin + step]),
                )
                for part in batch
            ]
            try:
                results = call(transfers)
                if not isinstance(results, dict):
                    raise TypeError(f"expected a dict of results, got {type(results).__name__}")
            except Exception:
                self.errors += 1
                results = {}
            for part, transfer in zip(batch, transfers, strict=True):
                flags = _flags(results, part.name, len(transfer.keys or ()))
                if flags is None:
                    self.errors += 1
                    flags = [False] * len(transfer.keys or ())
                out[part.name].extend(flags)
        return out


def _flags(results: dict[Any, Any], name: str, count: int) -> list[bool] | None:
    flags = results.get(name)
    if not isinstance(flags, list) or len(flags) != count:
        return None
    return [flag is True for flag in flags]


_KV = PoolName.KV.value


def _exists_result(result: Any, keys: int) -> tuple[int, Sequence[int], dict[str, int]]:
    """(KV run, restorable lengths, pool boundaries) of a ``PoolTransferResult``; raises on a malformed one.

    The lengths are a ``range(1, n + 1)`` when every prefix up to ``n`` is restorable, else a list.
    """
    kv_hit = result.kv_hit_pages
    hits = result.extra_pool_hit_pages or {}
    found = result.restorable_prefix_pages
    if isinstance(kv_hit, bool) or not isinstance(kv_hit, int) or not 0 <= kv_hit <= keys:
        raise TypeError(f"kv_hit_pages {kv_hit!r} is not a page count of {keys} keys")
    lengths: Sequence[int]
    if found is None:  # a backend without sparse boundaries: a contiguous prefix
        lengths = range(1, kv_hit + 1)
        top = kv_hit
    elif type(found) is list and 0 < len(found) <= keys and found == list(range(1, len(found) + 1)):
        lengths = range(1, len(found) + 1)
        top = len(found)
    elif found and found[0] > 0 and found[-1] <= keys and found == sorted(found):
        lengths = list(found)  # ascending within range: the filter below would keep every one
        top = lengths[-1]
    else:
        lengths = [n for n in found if 0 < n <= keys]  # a non-number raises: the answer counts as an error
        top = max(lengths, default=0)
    kv_run = int(hits.get(_KV, kv_hit))  # the KV pool is named only with a non-zero run
    kv_run = min(max(kv_run, top), keys)
    return kv_run, lengths, {pool_name_str(k): int(v) for k, v in hits.items()}
