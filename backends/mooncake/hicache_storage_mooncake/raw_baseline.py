"""The raw client ``hicache-storage bench mooncake`` compares the backend with: ``MooncakeDistributedStore``, no SDK.

The store is opened from the backend's own options (same master, metadata server, protocol,
segment and buffer sizes, ``replica_num``). Its batch calls move bytes only from and to memory
registered with the transfer engine, and the buffers a caller gives are not registered: each call
copies them through one registered staging buffer of ``staging_buffer_size`` bytes (allocated,
touched and registered at construction, as the backend's own staging buffer is) and moves each
staging-buffer-full of pages the way the backend does, through the client's put and get sessions
(start, ranged put, end; an existing object is removed and reserved again / start, ranged get,
end: the client's fastest calls), or, on a client without them, ``batch_upsert_from`` (the
store's own overwrite of a single-buffer object) and ``batch_get_into``. A get is a hit only when
the buffer's size arrived (a ranged get reads that many bytes of a longer object; a shorter one
is refused, a miss); exists is ``batch_is_exist``. No record header, no checksum, no key space, no
threads.

Why a copy rather than registering the caller's buffers: registering costs about a millisecond per
region (a metadata-server update), and a benchmark hands one separately allocated buffer per page,
so registering them would charge the raw side mostly for registration, a set-up cost the backend
pays once, untimed, for its whole host pool. The copy is one ``memcpy`` per page each way, also
what the store's own byte-level calls do with unregistered memory; the backend moves pool pages
without it, so the raw timings include that copy and the ratio leans slightly towards the SDK
(``benchmarks/bench_mooncake.py`` compares against raw calls on the registered pool, without it).

Objects are ``<key_prefix>raw-baseline/<key>``; storage keys never contain ``/``, so they never
meet the backend's records. Keys of one call must be distinct (as in any Mooncake batch).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hicache_storage.plugin import BackendFault
from hicache_storage.plugin.vectored_io import flat_view

from .client import OBJECT_ALREADY_EXISTS, TRANSFER_FAIL, import_store, open_store
from .options import MooncakeOptions
from .sessions import GET_SESSION_CALLS, PUT_SESSION_CALLS, has_sessions

__all__ = ["RAW_PREFIX", "RawMooncake"]

#: Put after ``key_prefix`` in front of every object key the raw client writes.
RAW_PREFIX = "raw-baseline/"


@dataclass(frozen=True)
class _StagedChunk:
    """Pages that fit the staging buffer together: object names, staging addresses and sizes, and
    each page's (caller view, staging offset, size)."""

    names: list[str]
    addresses: list[int]
    sizes: list[int]
    pieces: list[tuple[memoryview, int, int]]


class RawMooncake:
    """Mooncake batch calls through a registered staging buffer; a :class:`~hicache_storage.plugin.RawBaseline`.

    Not thread-safe: one call at a time. ``close()`` removes every object this client wrote,
    unregisters the staging buffer and closes the store.
    """

    def __init__(self, options: MooncakeOptions) -> None:
        _, replicate_cls = import_store()
        self._replicate = replicate_cls()
        self._replicate.replica_num = options.replica_num
        self.prefix = options.key_prefix + RAW_PREFIX
        self._staging = np.empty(options.size_of("staging_buffer_size"), dtype=np.uint8)
        self._staging.fill(0)  # fault the pages in now, not in the first timed call
        self._base = int(self._staging.ctypes.data)
        self.store: Any = open_store(options)
        code = self.store.register_buffer(self._base, self._staging.nbytes)
        if code != 0:
            self.store.close()
            raise BackendFault(f"Mooncake could not register the raw baseline's staging buffer (code {code})")
        self._written: set[str] = set()
        #: Writes and reads go through the client's put and get sessions (else upsert and get).
        self.sessions = has_sessions(self.store, PUT_SESSION_CALLS) and has_sessions(self.store, GET_SESSION_CALLS)

    @classmethod
    def from_options(cls, options: MooncakeOptions, timeout_s: float) -> RawMooncake:
        """A client of the backend's store; it keeps Mooncake's own RPC timeout (``timeout_s`` is not used)."""
        return cls(options)

    def key(self, key: str) -> str:
        """The Mooncake object key the raw client uses for ``key``."""
        return self.prefix + key

    def _chunks(self, views: Sequence[memoryview]) -> Iterator[range]:
        """Index ranges of ``views`` whose bytes fit the staging buffer together."""
        capacity = self._staging.nbytes
        begin, used = 0, 0
        for index, view in enumerate(views):
            if view.nbytes > capacity:
                raise ValueError(f"a page of {view.nbytes} bytes does not fit staging_buffer_size ({capacity})")
            if used + view.nbytes > capacity:
                yield range(begin, index)
                begin, used = index, 0
            used += view.nbytes
        if begin < len(views):
            yield range(begin, len(views))

    def _staged(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> Iterator[_StagedChunk]:
        """The pages in chunks that fit the staging buffer, each page's bytes back to back in it."""
        names = [self.prefix + key for key in keys]
        views = [flat_view(buffer) for buffer in buffers]
        for chunk in self._chunks(views):
            pieces, offset = [], 0
            for index in chunk:
                pieces.append((views[index], offset, views[index].nbytes))
                offset += views[index].nbytes
            yield _StagedChunk(
                names[chunk.start : chunk.stop],
                [self._base + start for _, start, _ in pieces],
                [size for _, _, size in pieces],
                pieces,
            )

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        results: list[bool] = []
        for chunk in self._staged(keys, buffers):
            for view, offset, size in chunk.pieces:
                self._staging[offset : offset + size] = np.frombuffer(view, np.uint8)
            if self.sessions:
                codes = self._put_session(chunk)
            else:
                codes = self.store.batch_upsert_from(chunk.names, chunk.addresses, chunk.sizes, self._replicate)
            results.extend(int(code) == 0 for code in codes)
            self._written.update(chunk.names)
        return results

    def _put_session(self, chunk: _StagedChunk) -> list[int]:
        """Codes of a put session of the chunk: an existing object is removed and reserved again."""
        store, names = self.store, chunk.names
        codes = [int(code) for code in store.batch_put_session_start(names, chunk.sizes, self._replicate)]
        existing = [n for n, code in enumerate(codes) if code == OBJECT_ALREADY_EXISTS]
        if existing:
            store.batch_remove([names[n] for n in existing], True)
            again = store.batch_put_session_start(
                [names[n] for n in existing], [chunk.sizes[n] for n in existing], self._replicate
            )
            for n, code in zip(existing, again, strict=True):
                codes[n] = int(code)
        started = [n for n, code in enumerate(codes) if code == 0]
        if not started:
            return codes
        moved = store.batch_put_from_multi_buffer_ranges(
            [names[n] for n in started],
            [[chunk.addresses[n]] for n in started],
            [[chunk.sizes[n]] for n in started],
            [[0] for _ in started],
        )
        done = [n for n, code in zip(started, moved, strict=True) if int(code) == chunk.sizes[n]]
        failed = [n for n in started if n not in done]
        if failed:
            store.batch_put_session_revoke([names[n] for n in failed])
            for n in failed:
                codes[n] = TRANSFER_FAIL
        if done:
            for n, code in zip(done, store.batch_put_session_end([names[n] for n in done]), strict=True):
                codes[n] = int(code)
        return codes

    def _get(self, chunk: _StagedChunk) -> list[int]:
        """Bytes read per object of the chunk (negative: a code), through a get session when the client has them."""
        if not self.sessions:
            return [int(code) for code in self.store.batch_get_into(chunk.names, chunk.addresses, chunk.sizes)]
        codes = [int(code) for code in self.store.batch_get_session_start(chunk.names)]
        started = [n for n, code in enumerate(codes) if code == 0]
        try:
            if started:
                moved = self.store.batch_get_into_multi_buffer_ranges(
                    [chunk.names[n] for n in started],
                    [[chunk.addresses[n]] for n in started],
                    [[chunk.sizes[n]] for n in started],
                    [[0] for _ in started],
                )
                for n, code in zip(started, moved, strict=True):
                    codes[n] = int(code)
        finally:
            self.store.batch_get_session_end(chunk.names)
        return codes

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        results: list[bool] = []
        for chunk in self._staged(keys, buffers):
            codes = self._get(chunk)
            for (view, offset, size), code in zip(chunk.pieces, codes, strict=True):
                hit = int(code) == size
                if hit:
                    np.frombuffer(view, np.uint8)[:] = self._staging[offset : offset + size]
                results.append(hit)
        return results

    def exists(self, keys: Sequence[str]) -> list[bool]:
        return [int(code) == 1 for code in self.store.batch_is_exist([self.prefix + key for key in keys])]

    def close(self) -> None:
        """Remove every object this client wrote, unregister the staging buffer, close the store."""
        try:
            if self._written:
                self.store.batch_remove(sorted(self._written), True)
                self._written.clear()
        finally:
            self.store.unregister_buffer(self._base)
            self.store.close()
