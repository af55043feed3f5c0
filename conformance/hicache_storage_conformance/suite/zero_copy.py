"""zero_copy: a backend declaring ``zero_copy`` moves v1 pages straight between host-pool memory and storage.

Checked two ways on pages of 128 KiB: the page buffers the primitives receive are views of the
host pool's own memory (addresses inside the pool's buffer, no bounce buffer), and a v1 write or
read allocates no page-sized intermediate buffer (tracemalloc: the peak above the memory in use
before and after the call stays under half a page). A backend that copies pages through ``bytes``
(``b"".join(page)``, ``bytes(record)``, a client returning a fresh ``bytes``) fails the claim.
"""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from .. import skips
from ..checks import SENTINEL, check, check_equal
from ..harness import Handle, Harness
from ..pages import PoolSpec, host_indices, read_slot, write_slot

T = TypeVar("T")

#: 16 tokens x 4 layers x 8 heads x 64 dims x 2 bytes x (K, V) = 128 KiB per page.
SPEC = PoolSpec(page_size=16, layer_num=4, head_num=8, head_dim=64, num_pages=16)
PAGES = 4
RULE = "zero_copy: v1 calls move bytes straight between host-pool memory and storage"


def _transient(call: Callable[[], T]) -> tuple[T, int]:
    """``call()`` and the peak of traced allocations above the memory in use before and after it."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = call()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    return result, max(0, peak - max(before, after))


def _address(segment: memoryview) -> int | None:
    try:
        return int(np.frombuffer(segment, dtype=np.uint8).ctypes.data)
    except (TypeError, ValueError):
        return None


@contextlib.contextmanager
def _recording(handle: Handle, seen: list[tuple[str, int | None, int]]) -> Iterator[None]:
    """Record (primitive, address, size) of every page segment the data primitives receive (pages of a
    pool, not the SDK's own metadata records such as key-space manifests)."""

    def recorder(name: str) -> Callable[..., Any]:
        def wrapper(original: Callable[..., Any], keys: Sequence[str], pages: Sequence[Any], *rest: Any) -> Any:
            if not rest or getattr(rest[0], "record_bytes", None) is None:
                seen.extend((name, _address(segment), segment.nbytes) for page in pages for segment in page)
            return original(keys, pages, *rest)

        return wrapper

    with (
        handle.interpose("write_pages", recorder("write_pages")),
        handle.interpose("read_pages", recorder("read_pages")),
    ):
        yield


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.0f} KiB"


class ZeroCopyTests:
    """Only for backends declaring ``zero_copy`` (and defining the v1 calls)."""

    category = "zero_copy"

    def _zero_copy_handle(self, harness: Harness) -> Handle:
        harness.require("zero_copy")
        harness.require_v1()
        return harness.open(SPEC)

    def _stored_or_skip(self, harness: Harness, handle: Handle, done: list[bool], what: str) -> None:
        if harness.caps.may_evict and not all(done):
            harness.skip(
                skips.UNOBSERVED,
                f"{what}: the evicting backend did not store pages of {_kib(handle.page_bytes)} (capacity too small?)",
                f"configure a capacity of at least {PAGES + 2} pages of {_kib(handle.page_bytes)}",
            )
        check_equal(done, [True] * len(done), what)

    def test_zero_copy_buffers_are_pool_memory(self, harness: Harness) -> None:
        """v1 calls hand the primitives views of the host pool's own memory, not copies."""
        handle = self._zero_copy_handle(harness)
        harness.require_sdk("primitive interposition")
        buffer = handle.pool.kv_buffer
        low = int(buffer.data_ptr())
        high = low + int(buffer.numel()) * int(buffer.element_size())
        keys = harness.keys(PAGES)
        seen: list[tuple[str, int | None, int]] = []
        with _recording(handle, seen):
            self._stored_or_skip(
                harness, handle, handle.set_v1(keys, 1, slots=range(PAGES)), f"batch_set_v1 of {PAGES}"
            )
            handle.check_pages(handle.get_v1(keys, slots=range(8, 8 + PAGES)), keys, 1, f"batch_get_v1 of {PAGES}")
        check(bool(seen), "recording the page buffers of write_pages/read_pages", "some segments", "none")
        outside = [(name, address) for name, address, size in seen if address is None or not low <= address < high]
        check(
            not outside,
            f"the page buffers write_pages/read_pages received in v1 calls ({len(seen)} segments)",
            f"views of the host pool's memory [{low:#x}, {high:#x})",
            f"{len(outside)} outside it, e.g. {outside[0][0]} at {outside[0][1]!r}" if outside else "",
            rule=RULE,
        )

    def test_zero_copy_no_page_sized_copies(self, harness: Harness) -> None:
        """v1 writes and reads allocate no page-sized intermediate buffer: reads land in the caller's page memory
        (for a backend that may evict, only reads are measured)."""
        handle = self._zero_copy_handle(harness)
        backend, pool = handle.backend, handle.pool
        warm = harness.keys(2)
        self._stored_or_skip(harness, handle, handle.set_v1(warm, 1), "a warm-up batch_set_v1")
        handle.get_v1(warm)
        keys = harness.keys(PAGES)
        for slot, key in enumerate(keys):
            write_slot(pool, slot, handle.content(key, 3))
        page = handle.page_bytes
        limit = page // 2
        written, spent = _transient(lambda: backend.batch_set_v1(keys, host_indices(pool, range(PAGES))))
        self._stored_or_skip(harness, handle, written, f"batch_set_v1 of {PAGES} pages of {_kib(page)}")
        check(  # an evicting store frees old records while it writes: only its reads are measured
            spent < limit or harness.caps.may_evict,
            f"transient allocations during batch_set_v1 of {PAGES} pages of {_kib(page)}",
            f"less than half a page ({_kib(limit)}) above the memory in use before and after",
            f"a peak {_kib(spent)} above it: the backend copies pages through an intermediate buffer",
            rule=RULE,
            hint="join segments only into what is stored, or declare zero_copy=False",
        )
        slots = list(range(8, 8 + PAGES))
        for slot in slots:
            write_slot(pool, slot, bytes([SENTINEL]) * page)
        hits, spent = _transient(lambda: backend.batch_get_v1(keys, host_indices(pool, slots)))
        pages = [read_slot(pool, slot) if hit else None for hit, slot in zip(hits, slots)]
        handle.check_pages(pages, keys, 3, f"batch_get_v1 of {PAGES} pages of {_kib(page)}")
        check(
            spent < limit,
            f"transient allocations during batch_get_v1 of {PAGES} pages of {_kib(page)}",
            f"less than half a page ({_kib(limit)}): the stored bytes land in the caller's page memory",
            f"a peak {_kib(spent)} above the memory in use: the backend reads pages into an intermediate buffer",
            rule=RULE,
            hint="read into the page's memoryviews (readinto, preadv, decode_into), or declare zero_copy=False",
        )
