"""Backend calls of the replay, batched like SGLang's engine, and the backend's I/O time and totals.

I/O time is the backend's modelled time when it keeps one (the sim backend's ``modelled_<op>_seconds``
counters), else the wall time the SDK measured around each call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..config import HiCacheStorageExtraInfo
from ..contract import HiCacheStorage
from ..pipeline import pages_to_tokens

__all__ = ["STORAGE_BATCH", "StorageIO", "io_seconds", "io_summary", "is_modelled"]

#: Pages per storage call, as SGLang's engine sends them.
STORAGE_BATCH = 128
_OPS = ("exists", "get", "set")


def is_modelled(backend: HiCacheStorage) -> bool:
    """Whether the backend reports modelled time (the sim backend)."""
    return hasattr(backend.backend, "last_call_seconds")


def io_seconds(backend: HiCacheStorage, ops: tuple[str, ...] = ("exists", "get")) -> float:
    """Cumulative I/O seconds of ``ops`` so far (modelled or measured)."""
    if is_modelled(backend):
        return sum(float(backend.stats.get(f"modelled_{op}_seconds")) for op in ops)
    return sum(float(backend.stats.op(op)["seconds"]) for op in ops)


def io_summary(backend: HiCacheStorage) -> dict[str, Any]:
    """Calls, pages, bytes and seconds per storage operation, from the backend's statistics."""
    rows = {op: backend.stats.op(op) for op in _OPS}
    return {
        "time_source": "modelled" if is_modelled(backend) else "measured",
        "calls": {op: int(rows[op]["calls"]) for op in _OPS},
        "pages": {op: int(rows[op]["pages"]) for op in _OPS},
        "bytes_read": int(rows["get"]["bytes"]),
        "bytes_written": int(rows["set"]["bytes"]),
        "seconds": {op: round(io_seconds(backend, (op,)), 6) for op in _OPS},
        "failed_reads": int(rows["get"]["failed"]),
        "failed_writes": int(rows["set"]["failed"]),
        "faults": backend.stats.total_faults(),
    }


class StorageIO:
    """Batched calls against a backend whose host pool is ``pool`` (slots are host page numbers).

    With ``pass_prefix_keys`` every call names the pages before its first one in their chain
    (``extra_info.prefix_keys``: the ``prefix`` a method is given, then the earlier batches), as
    SGLang does with ``hicache_storage_pass_prefix_keys`` set in its storage extra config.
    """

    def __init__(self, backend: HiCacheStorage, pool: Any, *, pass_prefix_keys: bool = False) -> None:
        self.backend = backend
        self.page_size = int(pool.page_size)
        self.pass_prefix_keys = pass_prefix_keys

    def _info(self, prefix: Sequence[str], hashes: list[str], start: int) -> HiCacheStorageExtraInfo | None:
        if not self.pass_prefix_keys:
            return None
        return HiCacheStorageExtraInfo(prefix_keys=[*prefix, *hashes[:start]])

    def exists_prefix(self, hashes: list[str], prefix: Sequence[str] = ()) -> int:
        """Leading run of stored pages (batches of 128, stopping at the first short one)."""
        found = 0
        for start in range(0, len(hashes), STORAGE_BATCH):
            chunk = hashes[start : start + STORAGE_BATCH]
            hit = self.backend.batch_exists(chunk, self._info(prefix, hashes, start))
            found += hit
            if hit < len(chunk):
                break
        return found

    def read(self, hashes: list[str], slots: list[int], prefix: Sequence[str] = ()) -> int:
        """Read pages into host ``slots``; returns the leading run read."""
        return self._run(self.backend.batch_get_v1, hashes, slots, prefix)

    def write(self, hashes: list[str], slots: list[int], prefix: Sequence[str] = ()) -> int:
        """Write pages from host ``slots``; returns the leading run stored (stops at a failed batch)."""
        return self._run(self.backend.batch_set_v1, hashes, slots, prefix)

    def _run(self, call: Any, hashes: list[str], slots: list[int], prefix: Sequence[str]) -> int:
        done = 0
        for start in range(0, len(hashes), STORAGE_BATCH):
            chunk = hashes[start : start + STORAGE_BATCH]
            tokens = pages_to_tokens(slots[start : start + STORAGE_BATCH], self.page_size)
            ok = _leading(call(chunk, tokens, self._info(prefix, hashes, start)))
            done += ok
            if ok < len(chunk):
                break
        return done


def _leading(results: list[bool]) -> int:
    count = 0
    for ok in results:
        if not ok:
            break
        count += 1
    return count
