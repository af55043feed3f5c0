"""The mooncake backend: one Mooncake Store object per page, moved straight from/to host-pool memory.

Every object is a 32-byte header followed by the page's segments back to back (see
:mod:`hicache_storage_mooncake.record`). The host pool's buffer and a header arena are registered
with the transfer engine, so with ``transfer: zero_copy`` pages travel by pointer:

- writes: a put session per batch (reserve the objects on a worker thread while the checksums and
  headers are computed, ranged puts of [header, segment, ...] 8 pages each, up to 4 at once, publish); a key
  that exists is removed (``force``) and reserved again. Clients without put sessions remove the
  batch's keys, then ``batch_put_from_multi_buffers`` (Mooncake's ``put`` keeps an old value). See
  :mod:`hicache_storage_mooncake.sessions` and :mod:`hicache_storage_mooncake.zero_copy`;
- reads: a get session per batch (replicas looked up once, one ranged get into [header slot,
  segment, ...]; clients without sessions: ``batch_get_into_multi_buffers``); the page is a hit only
  when header + page bytes arrived and the header matches (magic, version, digest of the object
  key, payload length) and, with ``verify_checksum`` (default), the XXH3-64 of the segments, hashed
  in place, matches too. (A ranged get reads the bytes asked for: an object longer than header +
  page is caught by its header, one shorter by the get's refusal.)

Mooncake's force-remove and upsert do not wait for readers, and freed memory is reused at once: a
read racing an overwrite can receive another object's bytes. The header check turns that into a
miss. Pages can instead be staged (option ``transfer``; always for pages outside registered
memory, such as v0 flat tensors): header and payload are copied contiguously into a slab of the
registered staging buffer and moved as one buffer, in the same sessions (without them:
``batch_upsert_from`` / ``batch_get_into``). Over TCP that is faster for small segments, each
buffer of a transfer costing a round trip of its own. Both ways store the same object, so staged
and zero-copy clients read each other's pages.

A batch in which every key fails with RPC_FAIL or RPC_TIMEOUT (master unreachable or not
answering) raises :class:`BackendFault`, which the SDK turns into misses / ``False`` and feeds to
the circuit breaker; other negative codes are per-key failures counted as ``mooncake_<code name>``.

Deadlines: the client's own RPC timeout (``MC_RPC_TIMEOUT_MS``, read at set-up) is derived from
the resilience deadline (``rpc_timeout_ms``), so a hung or slow master answers each RPC within a
fraction of it. A client whose master was killed retries its connection for seconds whatever that
timeout says, so under a deadline each Mooncake call runs on a worker thread and the caller waits
at most what is left of the deadline. A call given up on keeps its header or staging slab until it
ends (no other call can reuse memory it may still write), is counted as
``mooncake_abandoned_calls``, and its keys fail. A zero-copy read given up on may still complete
into its host pages later; that happens only when the master answers after the deadline, which a
restarted master (it holds no objects) never does. Writes without checksums are never given up on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from hicache_storage.plugin import (
    SHARED_STORE,
    Backend,
    BackendFault,
    BackendSetup,
    BatchContext,
    Capabilities,
    HostPool,
    KeySpace,
    PageBuffers,
)

from .calls import DeadlineCalls
from .client import OBJECT_NOT_FOUND, OUTAGE_CODES, CallGate, code_name, import_store, open_store
from .faster_of import FasterOf
from .memory import SlabArena, address, pool_tensors
from .options import MooncakeOptions
from .raw_baseline import RawMooncake
from .record import HEADER_SIZE, RecordCheck, check_header, key_digest, payload_checksum
from .sessions import GET_SESSION_CALLS, PIPELINE_PAGES, PUT_SESSION_CALLS, has_sessions
from .staged import read_staged, write_staged
from .zero_copy import read_direct, write_direct

__all__ = ["AUTO_STAGE_BELOW_SEGMENT_BYTES", "HEADER_SLABS", "STAGING_SLABS", "MooncakeBackend"]

#: How long ``close()`` waits for calls in flight before giving up on closing the client.
CLOSE_WAIT_S = 30.0
#: Header slabs (of ``max_batch_size`` headers each) in the arena: calls running at once before one waits.
HEADER_SLABS = 16
#: The staging buffer is split into this many slabs, so this many staged calls can run at once.
STAGING_SLABS = 4
#: ``transfer: auto`` over TCP stages pages whose segments average less than this: TCP moves each
#: buffer of a multi-buffer transfer as a request of its own, at a fixed cost (about 25 µs here)
#: that a copy of a smaller segment undercuts.
AUTO_STAGE_BELOW_SEGMENT_BYTES = 256 << 10


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


class MooncakeBackend(Backend[MooncakeOptions]):
    """Pages in a Mooncake Store (see :class:`MooncakeOptions`).

    Construction sets up the client and raises :class:`BackendFault` naming the master when none
    answers (after ``setup_retries`` attempts of about 4.4 s each). ``client`` is the
    ``MooncakeDistributedStore`` (``None`` once released); every call on it goes through ``gate``
    (a :class:`~hicache_storage_mooncake.client.CallGate`, refusing calls once the backend is
    released) and writes use ``replicate``. ``mooncake_key`` maps a storage key to its object key.
    """

    Options = MooncakeOptions
    #: Mooncake batch calls through a registered staging buffer for ``hicache-storage bench`` to compare with.
    raw_baseline_class = RawMooncake
    capabilities = SHARED_STORE.with_overrides(
        {"zero_copy": True, "persistent": False, "may_evict": True, "supports_list": False}
    )

    @classmethod
    def capabilities_for(cls, options: MooncakeOptions) -> Capabilities:
        """Without checksums payload corruption is not seen; staged transfers copy every page."""
        declared = cls.capabilities
        if not options.verify_checksum:  # key and length still checked
            declared = dataclasses.replace(declared, verifies_integrity=False)
        if options.transfer == "staged":
            declared = dataclasses.replace(declared, zero_copy=False)
        return declared

    def __init__(self, setup: BackendSetup[MooncakeOptions]) -> None:
        options = setup.options
        self.options = options
        self.counters = setup.counters
        self.io_timeout_s = setup.io_timeout_s
        self._batch_slots = max(1, int(setup.capabilities.max_batch_size or 1))
        self.key_prefix = options.key_prefix
        self.verify_checksum = bool(options.verify_checksum)
        _, replicate_cls = import_store()
        self.replicate: Any = replicate_cls()
        self.replicate.replica_num = options.replica_num
        self.gate = CallGate()
        self.calls = DeadlineCalls(self.gate, lambda: self.counters.bump("mooncake_abandoned_calls"))
        self.client: Any = open_store(options, self.rpc_timeout_ms)
        #: Writes reserve, fill and publish objects in put sessions (else: remove + put, or upsert staged).
        self.put_sessions = has_sessions(self.client, PUT_SESSION_CALLS)
        #: Reads look the replicas up once and get ranges (else: ``batch_get_into_multi_buffers`` / ``_into``).
        self.get_sessions = has_sessions(self.client, GET_SESSION_CALLS)
        #: The calls of a zero-copy read: ``get_calls``, or, for ``"auto"``, the cheaper as measured.
        self.get_calls = _get_calls(options.get_calls, self.get_sessions)
        #: Pages a session write prepares before moving them (the next ones are prepared meanwhile).
        self.pipeline_pages = PIPELINE_PAGES
        self._regions: list[tuple[int, int]] = []
        self._headers: SlabArena | None = None
        self._staging: SlabArena | None = None
        self._setup_lock = threading.Lock()

    @property
    def rpc_timeout_ms(self) -> int:
        """Timeout of one master RPC: ``rpc_timeout_ms``, else 40 % of the I/O timeout (the deadline), at
        least 50 ms, so a read and a write (reserve, publish; an overwrite also removes and reserves
        again) fit in one deadline when the master answers slowly."""
        if self.options.rpc_timeout_ms is not None:
            return int(self.options.rpc_timeout_ms)
        return max(50, round(self.io_timeout_s * 400))

    # ------------------------------------------------------------ set-up
    def on_register_pool(self, pool: HostPool, keyspace: KeySpace) -> None:
        """Register the pool's buffers, the header arena and staging slabs (sized for the largest page)."""
        for tensor in pool_tensors(pool):
            self._register(int(tensor.data_ptr()), int(tensor.numel() * tensor.element_size()))
        largest = max(keyspace.page_bytes, self._staging.item_bytes - HEADER_SIZE if self._staging else 0)
        record_bytes = HEADER_SIZE + largest
        per_slab = max(1, self.options.size_of("staging_buffer_size") // STAGING_SLABS // record_bytes)
        with self._setup_lock:
            if self._headers is None:
                arena = SlabArena(HEADER_SLABS, self._batch_slots, HEADER_SIZE, "header")
                if not self._register(arena.base, arena.size):
                    raise BackendFault("Mooncake could not register the header arena")
                self._headers = arena
            if self._staging is None or self._staging.item_bytes != record_bytes:
                staging = SlabArena(STAGING_SLABS, per_slab, record_bytes, "staging")
                if self._register(staging.base, staging.size):
                    self._staging = staging

    def _register(self, ptr: int, size: int) -> bool:
        if size <= 0:
            return False
        if self._registered(ptr, size):
            return True
        with self.gate:
            code = self.client.register_buffer(ptr, size)
        if code != 0:  # left unregistered: its pages are copied through the staging buffer
            self.counters.bump("mooncake_register_failed")
            return False
        self._regions.append((ptr, ptr + size))
        return True

    def _registered(self, ptr: int, size: int) -> bool:
        return any(begin <= ptr and ptr + size <= end for begin, end in self._regions)

    def mooncake_key(self, storage_key: str) -> str:
        """The Mooncake object key of a storage key."""
        return self.key_prefix + storage_key

    # ------------------------------------------------------------ codes
    def check_codes(self, codes: Any, count: int, what: str) -> list[int]:
        """Return codes as ints; :class:`BackendFault` when the call failed as a whole."""
        if not isinstance(codes, list) or len(codes) != count:
            raise BackendFault(f"Mooncake {what} returned {codes!r} for {count} keys")
        values = [int(code) for code in codes]
        if values and all(code in OUTAGE_CODES for code in values):
            self.counters.bump(code_name(values[0]))
            raise BackendFault(f"Mooncake master {self.options.master_server_address} unreachable during {what}")
        for code in values:
            if code < 0 and code != OBJECT_NOT_FOUND:
                self.counters.bump(code_name(code))
        return values

    def _stages_everything(self, pages: Sequence[PageBuffers]) -> bool:
        """Whether ``transfer`` sends these pages through the staging slabs (see :class:`MooncakeOptions`)."""
        mode = self.options.transfer
        if mode == "auto" and self.options.protocol == "tcp" and pages:
            segments = pages[0]
            return sum(segment.nbytes for segment in segments) < AUTO_STAGE_BELOW_SEGMENT_BYTES * len(segments)
        return bool(mode == "staged")

    def _plan(self, pages: Sequence[PageBuffers]) -> tuple[list[int], list[list[int]], list[list[int]], list[int]]:
        """Split pages into direct (index, pointers, sizes) and staged (indices) transfers."""
        if self._stages_everything(pages):
            return [], [], [], list(range(len(pages)))
        direct: list[int] = []
        ptrs: list[list[int]] = []
        sizes: list[list[int]] = []
        staged: list[int] = []
        for index, page in enumerate(pages):
            page_ptrs = [address(segment) for segment in page]
            page_sizes = [segment.nbytes for segment in page]
            if all(self._registered(p, s) for p, s in zip(page_ptrs, page_sizes, strict=True)):
                direct.append(index)
                ptrs.append(page_ptrs)
                sizes.append(page_sizes)
            else:
                staged.append(index)
        return direct, ptrs, sizes, staged

    def staging_arena(self) -> SlabArena:
        """The registered staging slabs (:class:`BackendFault` before a pool was registered)."""
        if self._staging is None:
            raise BackendFault("no staging buffer: register_mem_pool_host was not called (or registration failed)")
        return self._staging

    def header_arena(self) -> SlabArena:
        """The registered header slots (:class:`BackendFault` before a pool was registered)."""
        if self._headers is None:
            raise BackendFault("no header arena: register_mem_pool_host was not called")
        return self._headers

    def digest(self, segments: Sequence[Any]) -> int | None:
        """XXH3-64 of the segments, ``None`` with ``verify_checksum: false``."""
        return payload_checksum(segments) if self.verify_checksum else None

    def accept(self, header: Any, offset: int, name: str, segments: Sequence[Any], length: int) -> bool:
        """Whether the header at ``header[offset:]`` and the payload in ``segments`` form this key's page."""
        verdict, digest = check_header(header, offset, length, key_digest(name), self.verify_checksum)
        if verdict is RecordCheck.OK and self.verify_checksum and payload_checksum(segments) != digest:
            verdict = RecordCheck.BAD_CHECKSUM
        if verdict is RecordCheck.OK:
            return True
        self.counters.bump(f"mooncake_{verdict.value}")
        self.counters.bump("integrity_failures")
        return False

    # ------------------------------------------------------------ primitives
    def write_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
        """Store each page as [header, segments] (a put session, or remove + put; staged pages: upsert)."""
        return self._by_rounds(self._write_once, keys, pages)

    def read_pages(self, keys: Sequence[str], pages: Sequence[PageBuffers], context: BatchContext) -> list[bool]:
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
        return self._by_slab(keys, pages, write_direct, write_staged)

    def _read_once(self, keys: Sequence[str], pages: Sequence[PageBuffers]) -> list[bool]:
        return self._by_slab(keys, pages, read_direct, read_staged)

    def _by_slab(
        self,
        keys: Sequence[str],
        pages: Sequence[PageBuffers],
        direct_op: Callable[
            [MooncakeBackend, list[str], list[PageBuffers], list[list[int]], list[list[int]]], list[bool]
        ],
        staged_op: Callable[[MooncakeBackend, list[str], Sequence[PageBuffers], list[int], list[bool]], None],
    ) -> list[bool]:
        """Run ``direct_op`` on pool pages one header slab at a time, ``staged_op`` on the others."""
        out = [False] * len(keys)
        mkeys = [self.mooncake_key(key) for key in keys]
        direct, ptrs, sizes, staged = self._plan(pages)
        step = self.header_arena().per_slab
        for begin in range(0, len(direct), step):
            chunk = direct[begin : begin + step]
            done = direct_op(
                self,
                [mkeys[i] for i in chunk],
                [pages[i] for i in chunk],
                ptrs[begin : begin + step],
                sizes[begin : begin + step],
            )
            for index, ok in zip(chunk, done, strict=True):
                out[index] = ok
        if staged:
            staged_op(self, mkeys, pages, staged, out)
        return out

    def complete(self, code: int, expected: int) -> bool:
        """Whether a get's code says exactly ``expected`` bytes arrived (another size is counted)."""
        if code >= 0 and code != expected:
            self.counters.bump("mooncake_size_mismatch")
        return code == expected

    def pages_exist(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """``batch_is_exist``: 1 is a hit; 0 and errors are misses."""
        names = [self.mooncake_key(key) for key in keys]
        codes = self.check_codes(
            self.calls.call("batch_is_exist", self.client.batch_is_exist, names), len(keys), "batch_is_exist"
        )
        return [code == 1 for code in codes]

    def delete_pages(self, keys: Sequence[str], context: BatchContext) -> list[bool]:
        """``batch_remove(force=True)``; a key already absent counts as deleted."""
        names = [self.mooncake_key(key) for key in keys]
        codes = self.check_codes(
            self.calls.call("batch_remove", self.client.batch_remove, names, True), len(keys), "batch_remove"
        )
        return [code in (0, OBJECT_NOT_FOUND) for code in codes]

    def clear_pages(self, prefixes: Sequence[str] | None) -> None:
        """Remove the objects of the key spaces ``prefixes`` under ``key_prefix`` (``None``: every object
        under it; with an empty ``key_prefix``, every object of the store)."""
        for prefix in [""] if prefixes is None else prefixes:
            pattern = "^" + (self.key_prefix + prefix).replace(".", r"\.")
            with self.gate:
                removed = int(self.client.remove_by_regex(pattern, True))
            if removed < 0:
                self.counters.bump(code_name(removed))
                raise BackendFault(f"Mooncake remove_by_regex failed with code {removed}")

    def release(self) -> None:
        """Wait for calls in flight, unregister buffers, close the client."""
        if not self.gate.shut(CLOSE_WAIT_S):
            self.counters.bump("mooncake_close_abandoned")
            return
        self.calls.shutdown()
        store, self.client = self.client, None
        if store is None:
            return
        for begin, _end in self._regions:
            store.unregister_buffer(begin)
        self._regions.clear()
        store.close()


def _get_calls(option: str, sessions: bool) -> FasterOf | str:
    """What ``get_calls`` resolves to: ``"plain"`` without session calls, a chooser for ``"auto"``."""
    if not sessions:
        return "plain"
    return FasterOf(("session", "plain")) if option == "auto" else option
