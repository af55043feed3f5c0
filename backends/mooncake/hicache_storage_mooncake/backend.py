"""The mooncake backend: one Mooncake Store object per page, moved straight from/to host-pool memory.

Every object is a 32-byte header followed by the page's segments back to back (see
:mod:`hicache_storage_mooncake.record`). The host pool's buffer and a header arena are registered
with the transfer engine, so pages travel by pointer:

- writes: ``batch_put_from_multi_buffers`` of [header, segment, ...]. Mooncake has no multi-buffer
  upsert and ``put`` keeps an old value, so the batch's keys are removed (``force``) first;
- reads: ``batch_get_into_multi_buffers`` into [header slot, segment, ...]; the page is a hit only
  when exactly header + page bytes arrived and the header matches (magic, version, digest of the
  object key, payload length) and, with ``verify_checksum`` (default), the XXH3-64 of the segments,
  hashed in place, matches too.

Mooncake's force-remove and upsert do not wait for readers, and freed memory is reused at once: a
read racing an overwrite can receive another object's bytes. The header check turns that into a
miss. Pages outside registered memory (v0 flat tensors) go through a registered staging buffer
holding header and payload contiguously (``batch_upsert_from`` / ``batch_get_into``), so v0 and v1
pages are interchangeable. A batch in which every key fails with RPC_FAIL (master unreachable)
raises :class:`BackendFault`, which the SDK turns into misses / ``False`` and feeds to the circuit
breaker; other negative codes are per-key failures counted as ``mooncake_<code name>``.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import torch

from hicache_storage import BackendFault, Capabilities, HiCacheStorage, HiCacheStorageConfig
from hicache_storage.page_buffers import PageBuffers

from .client import OBJECT_NOT_FOUND, RPC_FAIL, CallGate, code_name, import_store, open_store
from .options import MooncakeOptions
from .record import HEADER_SIZE, RecordCheck, check_header, key_digest, pack_header, payload_checksum

__all__ = ["HEADER_SLABS", "MooncakeBackend", "MooncakeRawStore"]

#: How long ``close()`` waits for calls in flight before giving up on closing the client.
CLOSE_WAIT_S = 30.0
#: Header slabs (of ``max_batch_size`` headers each) in the arena: calls running at once before one waits.
HEADER_SLABS = 16
#: How long a call waits for a free header slab before failing (counted as a fault).
SLAB_WAIT_S = 30.0


def _rounds(keys: Sequence[str]) -> list[list[int]]:
    """Positions of ``keys`` split so no round repeats a key (in order: the last write wins)."""
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for index, key in enumerate(keys):
        depth = seen.get(key, -1) + 1
        seen[key] = depth
        if depth == len(rounds):
            rounds.append([])
        rounds[depth].append(index)
    return rounds


def _address(segment: memoryview) -> int:
    """Address of a segment's first byte (read-only views too)."""
    return int(np.frombuffer(segment, np.uint8).__array_interface__["data"][0])


class HeaderArena:
    """Registered memory for object headers, lent out in slabs of ``per_slab`` headers (one slab per call)."""

    def __init__(self, slabs: int, per_slab: int) -> None:
        self.per_slab = per_slab
        self.slab_bytes = per_slab * HEADER_SIZE
        self.tensor = torch.zeros(slabs * self.slab_bytes, dtype=torch.uint8)
        self.base = int(self.tensor.data_ptr())
        self.size = slabs * self.slab_bytes
        self.view = self.tensor.numpy().data.cast("B")
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slab in range(slabs):
            self._free.put(slab * self.slab_bytes)

    @contextmanager
    def slab(self) -> Iterator[int]:
        """Offset of a slab reserved for the caller until the block ends."""
        try:
            offset = self._free.get(timeout=SLAB_WAIT_S)
        except queue.Empty:
            raise BackendFault(f"no free header slab within {SLAB_WAIT_S} s") from None
        try:
            yield offset
        finally:
            self._free.put(offset)


class MooncakeBackend(HiCacheStorage):
    """Pages in a Mooncake Store (see :class:`MooncakeOptions`).

    Construction sets up the client and raises :class:`BackendFault` naming the master when none
    answers (after ``setup_retries`` attempts of about 4.4 s each). ``raw_store()`` is a mapping
    over the stored objects (storage key → bytes, header included) for tools and tests.
    """

    Options: ClassVar[type[Any]] = MooncakeOptions
    capabilities: ClassVar[Capabilities] = Capabilities(
        zero_copy=True,
        persistent=False,
        shared=True,
        may_evict=True,
        supports_delete=True,
        supports_clear=True,
        max_batch_size=128,
        verifies_integrity=True,
    )

    def __init__(self, config: HiCacheStorageConfig) -> None:
        super().__init__(config)
        options: MooncakeOptions = self.options
        self.key_prefix = options.key_prefix
        self.verify_checksum = bool(options.verify_checksum)
        if not self.verify_checksum:  # key and length still checked, payload corruption is not seen
            self.capabilities = dataclasses.replace(type(self).capabilities, verifies_integrity=False)  # type: ignore[misc]
        _, replicate_cls = import_store()
        self._replicate = replicate_cls()
        self._replicate.replica_num = options.replica_num
        self._gate = CallGate()
        self._store: Any = open_store(options)
        self._regions: list[tuple[int, int]] = []
        self._headers: HeaderArena | None = None
        self._staging: torch.Tensor | None = None
        self._staging_pages = 0
        self._staging_lock = threading.Lock()

    # ------------------------------------------------------------ set-up
    def on_register_pool(self, pool: Any) -> None:
        """Register the pool's buffer(s), the header arena and a staging buffer with the transfer engine."""
        buffers = pool.kv_buffer if isinstance(pool.kv_buffer, (list, tuple)) else [pool.kv_buffer]
        for tensor in buffers:
            self._register(int(tensor.data_ptr()), int(tensor.numel() * tensor.element_size()))
        page_bytes = self.keyspace.page_bytes if self.keyspace is not None else 0
        record_bytes = HEADER_SIZE + page_bytes
        pages = max(1, int(self.options.staging_buffer_size) // record_bytes)
        with self._staging_lock:
            if self._headers is None:
                arena = HeaderArena(HEADER_SLABS, max(1, int(self.capabilities.max_batch_size or 1)))
                if not self._register(arena.base, arena.size):
                    raise BackendFault("Mooncake could not register the header arena")
                self._headers = arena
            if self._staging is None:
                self._staging = torch.empty(pages * record_bytes, dtype=torch.uint8)
                self._staging_pages = pages
                self._register(int(self._staging.data_ptr()), pages * record_bytes)

    def _register(self, ptr: int, size: int) -> bool:
        if size <= 0:
            return False
        if self._registered(ptr, size):
            return True
        with self._gate:
            code = self._store.register_buffer(ptr, size)
        if code != 0:  # left unregistered: its pages are copied through the staging buffer
            self.stats.bump("mooncake_register_failed")
            return False
        self._regions.append((ptr, ptr + size))
        return True

    def _registered(self, ptr: int, size: int) -> bool:
        return any(begin <= ptr and ptr + size <= end for begin, end in self._regions)

    def mooncake_key(self, storage_key: str) -> str:
        """The Mooncake object key of a storage key."""
        return self.key_prefix + storage_key

    def raw_store(self) -> MooncakeRawStore:
        """Mapping storage key → stored object bytes, behind the backend's back (small objects only)."""
        return MooncakeRawStore(self)

    # ------------------------------------------------------------ codes
    def _check(self, codes: Any, count: int, what: str) -> list[int]:
        """Return codes as ints; :class:`BackendFault` when the call failed as a whole."""
        if not isinstance(codes, list) or len(codes) != count:
            raise BackendFault(f"Mooncake {what} returned {codes!r} for {count} keys")
        values = [int(code) for code in codes]
        if values and all(code == RPC_FAIL for code in values):
            raise BackendFault(f"Mooncake master {self.options.master_server_address} unreachable during {what}")
        for code in values:
            if code < 0 and code != OBJECT_NOT_FOUND:
                self.stats.bump(code_name(code))
        return values

    def _plan(self, pages: Sequence[PageBuffers]) -> tuple[list[int], list[list[int]], list[list[int]], list[int]]:
        """Split pages into direct (index, pointers, sizes) and staged (indices) transfers."""
        direct: list[int] = []
        ptrs: list[list[int]] = []
        sizes: list[list[int]] = []
        staged: list[int] = []
        for index, page in enumerate(pages):
            page_ptrs = [_address(segment) for segment in page]
            page_sizes = [segment.nbytes for segment in page]
            if all(self._registered(p, s) for p, s in zip(page_ptrs, page_sizes, strict=True)):
                direct.append(index)
                ptrs.append(page_ptrs)
                sizes.append(page_sizes)
            else:
                staged.append(index)
        return direct, ptrs, sizes, staged

    def _staging_chunks(self, staged: list[int]) -> Iterator[list[int]]:
        step = max(1, self._staging_pages)
        for begin in range(0, len(staged), step):
            yield staged[begin : begin + step]

    def _staging_view(self) -> tuple[np.ndarray, int]:
        if self._staging is None:
            raise BackendFault("no staging buffer: register_mem_pool_host was not called")
        return self._staging.numpy(), int(self._staging.data_ptr())

    def _arena(self) -> HeaderArena:
        if self._headers is None:
            raise BackendFault("no header arena: register_mem_pool_host was not called")
        return self._headers

    def _digest(self, segments: Sequence[Any]) -> int | None:
        return payload_checksum(segments) if self.verify_checksum else None

    def _accept(self, header: Any, offset: int, name: str, segments: Sequence[Any], length: int) -> bool:
        """Whether the header at ``header[offset:]`` and the payload in ``segments`` form this key's page."""
        verdict, digest = check_header(header, offset, length, key_digest(name), self.verify_checksum)
        if verdict is RecordCheck.OK and self.verify_checksum and payload_checksum(segments) != digest:
            verdict = RecordCheck.BAD_CHECKSUM
        if verdict is RecordCheck.OK:
            return True
        self.stats.bump(f"mooncake_{verdict.value}")
        return False

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        """Store each page as [header, segments] (remove, then multi-buffer put; staged pages: upsert)."""
        return self._by_rounds(self._write_once, keys, pages)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        """Read each object into [header slot, segments]; a hit only when size and header (and checksum) match."""
        return self._by_rounds(self._read_once, keys, pages)

    @staticmethod
    def _by_rounds(run: Any, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        rounds = _rounds(keys)
        if len(rounds) == 1:
            return list(run(keys, pages))
        out = [False] * len(keys)
        for positions in rounds:  # Mooncake batches must not repeat a key
            results = run([keys[i] for i in positions], [pages[i] for i in positions])
            for index, ok in zip(positions, results, strict=True):
                out[index] = ok
        return out

    def _write_once(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        return self._by_slab(keys, pages, self._write_direct, self._write_staged)

    def _by_slab(
        self,
        keys: Sequence[str],
        pages: Sequence[PageBuffers],
        direct_op: Callable[[list[str], list[PageBuffers], list[list[int]], list[list[int]]], list[bool]],
        staged_op: Callable[[list[str], Sequence[PageBuffers], list[int], list[bool]], None],
    ) -> list[bool]:
        """Run ``direct_op`` on pool pages one header slab at a time, ``staged_op`` on the others."""
        out = [False] * len(keys)
        mkeys = [self.mooncake_key(key) for key in keys]
        direct, ptrs, sizes, staged = self._plan(pages)
        step = self._arena().per_slab
        for begin in range(0, len(direct), step):
            chunk = direct[begin : begin + step]
            done = direct_op(
                [mkeys[i] for i in chunk],
                [pages[i] for i in chunk],
                ptrs[begin : begin + step],
                sizes[begin : begin + step],
            )
            for index, ok in zip(chunk, done, strict=True):
                out[index] = ok
        if staged:
            staged_op(mkeys, pages, staged, out)
        return out

    def _write_direct(
        self, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
    ) -> list[bool]:
        """Remove, then put [header, segments...] for pages in registered memory (at most one slab)."""
        arena = self._arena()
        out = [False] * len(names)
        with arena.slab() as slab:
            all_ptrs: list[list[int]] = []
            all_sizes: list[list[int]] = []
            for n, page in enumerate(pages):  # headers (and checksums) before the remove: a short gap
                offset = slab + n * HEADER_SIZE
                pack_header(arena.view, offset, sum(sizes[n]), self._digest(page), key_digest(names[n]))
                all_ptrs.append([arena.base + offset, *ptrs[n]])
                all_sizes.append([HEADER_SIZE, *sizes[n]])
            with self._gate:
                removed = self._check(self._store.batch_remove(names, True), len(names), "batch_remove")
                # A key whose old object could not be removed is not put: put would keep the old value.
                todo = [n for n, code in enumerate(removed) if code in (0, OBJECT_NOT_FOUND)]
                if not todo:
                    return out
                codes = self._check(
                    self._store.batch_put_from_multi_buffers(
                        [names[n] for n in todo],
                        [all_ptrs[n] for n in todo],
                        [all_sizes[n] for n in todo],
                        self._replicate,
                    ),
                    len(todo),
                    "batch_put_from_multi_buffers",
                )
        for n, code in zip(todo, codes, strict=True):
            out[n] = code == 0
        return out

    def _write_staged(self, mkeys: list[str], pages: Sequence[PageBuffers], staged: list[int], out: list[bool]) -> None:
        with self._staging_lock:
            host, base = self._staging_view()
            view = host.data.cast("B")
            for chunk in self._staging_chunks(staged):
                chunk_ptrs, chunk_sizes = [], []
                offset = 0
                for index in chunk:
                    start = offset
                    offset += HEADER_SIZE
                    for segment in pages[index]:
                        host[offset : offset + segment.nbytes] = np.frombuffer(segment, np.uint8)
                        offset += segment.nbytes
                    length = offset - start - HEADER_SIZE
                    digest = self._digest([view[start + HEADER_SIZE : offset]])
                    pack_header(view, start, length, digest, key_digest(mkeys[index]))
                    chunk_ptrs.append(base + start)
                    chunk_sizes.append(offset - start)
                with self._gate:
                    codes = self._check(
                        self._store.batch_upsert_from(
                            [mkeys[i] for i in chunk], chunk_ptrs, chunk_sizes, self._replicate
                        ),
                        len(chunk),
                        "batch_upsert_from",
                    )
                for index, code in zip(chunk, codes, strict=True):
                    out[index] = code == 0

    def _read_once(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        return self._by_slab(keys, pages, self._read_direct, self._read_staged)

    def _read_direct(
        self, names: list[str], pages: list[PageBuffers], ptrs: list[list[int]], sizes: list[list[int]]
    ) -> list[bool]:
        """Get into [header slot, segments...] for pages in registered memory (at most one slab); then check."""
        arena = self._arena()
        out = [False] * len(names)
        with arena.slab() as slab:
            arena.view[slab : slab + len(names) * HEADER_SIZE] = bytes(len(names) * HEADER_SIZE)
            all_ptrs = [[arena.base + slab + n * HEADER_SIZE, *ptrs[n]] for n in range(len(names))]
            all_sizes = [[HEADER_SIZE, *sizes[n]] for n in range(len(names))]
            with self._gate:
                codes = self._check(
                    self._store.batch_get_into_multi_buffers(names, all_ptrs, all_sizes),
                    len(names),
                    "batch_get_into_multi_buffers",
                )
            for n, code in enumerate(codes):
                length = sum(sizes[n])
                if self._complete(code, HEADER_SIZE + length):
                    out[n] = self._accept(arena.view, slab + n * HEADER_SIZE, names[n], pages[n], length)
        return out

    def _complete(self, code: int, expected: int) -> bool:
        if code >= 0 and code != expected:
            self.stats.bump("mooncake_size_mismatch")
        return code == expected

    def _read_staged(self, mkeys: list[str], pages: Sequence[PageBuffers], staged: list[int], out: list[bool]) -> None:
        with self._staging_lock:
            host, base = self._staging_view()
            view = host.data.cast("B")
            for chunk in self._staging_chunks(staged):
                totals = [HEADER_SIZE + sum(segment.nbytes for segment in pages[index]) for index in chunk]
                starts = [sum(totals[:n]) for n in range(len(chunk))]
                with self._gate:
                    codes = self._check(
                        self._store.batch_get_into([mkeys[i] for i in chunk], [base + s for s in starts], totals),
                        len(chunk),
                        "batch_get_into",
                    )
                for index, code, start, total in zip(chunk, codes, starts, totals, strict=True):
                    if not self._complete(code, total):
                        continue
                    payload = view[start + HEADER_SIZE : start + total]
                    if not self._accept(view, start, mkeys[index], [payload], total - HEADER_SIZE):
                        continue
                    offset = start + HEADER_SIZE
                    for segment in pages[index]:
                        np.frombuffer(segment, np.uint8)[:] = host[offset : offset + segment.nbytes]
                        offset += segment.nbytes
                    out[index] = True

    def pages_exist(self, keys: Sequence[str]) -> list[bool]:
        """``batch_is_exist``: 1 is a hit; 0 and errors are misses."""
        with self._gate:
            codes = self._check(
                self._store.batch_is_exist([self.mooncake_key(key) for key in keys]), len(keys), "batch_is_exist"
            )
        return [code == 1 for code in codes]

    def delete_pages(self, keys: Sequence[str]) -> list[bool]:
        """``batch_remove(force=True)``; a key already absent counts as deleted."""
        with self._gate:
            codes = self._check(
                self._store.batch_remove([self.mooncake_key(key) for key in keys], True), len(keys), "batch_remove"
            )
        return [code in (0, OBJECT_NOT_FOUND) for code in codes]

    def clear_pages(self) -> None:
        """Remove every object of this deployment's key space under ``key_prefix`` (all ranks)."""
        if self.keyspace is None:
            return
        pattern = "^" + (self.key_prefix + self.keyspace.prefix).replace(".", r"\.")
        with self._gate:
            removed = int(self._store.remove_by_regex(pattern, True))
        if removed < 0:
            self.stats.bump(code_name(removed))
            raise BackendFault(f"Mooncake remove_by_regex failed with code {removed}")

    def release(self) -> None:
        """Wait for calls in flight, unregister buffers, close the client."""
        if not self._gate.shut(CLOSE_WAIT_S):
            self.stats.bump("mooncake_close_abandoned")
            return
        store, self._store = self._store, None
        if store is None:
            return
        for begin, _end in self._regions:
            store.unregister_buffer(begin)
        self._regions.clear()
        store.close()


class MooncakeRawStore(MutableMapping[str, bytes]):
    """Stored objects by storage key, through the backend's client (byte calls: small objects only).

    Mooncake cannot list keys, so iteration and ``len`` raise :class:`TypeError`.
    """

    def __init__(self, backend: MooncakeBackend) -> None:
        self._backend = backend

    def _call(self, method: str, *args: Any) -> Any:
        with self._backend._gate:
            return getattr(self._backend._store, method)(*args)

    def __getitem__(self, key: str) -> bytes:
        name = self._backend.mooncake_key(key)
        if int(self._call("get_size", name)) < 0:
            raise KeyError(key)
        return bytes(self._call("get", name))

    def __setitem__(self, key: str, value: bytes) -> None:
        code = int(self._call("upsert", self._backend.mooncake_key(key), bytes(value), self._backend._replicate))
        if code != 0:
            raise BackendFault(f"Mooncake upsert failed with code {code}")

    def __delitem__(self, key: str) -> None:
        code = int(self._call("remove", self._backend.mooncake_key(key), True))
        if code == OBJECT_NOT_FOUND:
            raise KeyError(key)
        if code != 0:
            raise BackendFault(f"Mooncake remove failed with code {code}")

    def __iter__(self) -> Iterator[str]:
        raise TypeError("a Mooncake Store cannot list its keys")

    def __len__(self) -> int:
        raise TypeError("a Mooncake Store cannot count its keys")
