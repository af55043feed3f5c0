"""One backend instance with a hybrid model's host pools, and the multi-pool (v2) calls tests make on it.

The pools are the test kit's (:func:`hicache_storage.testing.make_hybrid_pools`): ``kv`` (full
attention), ``swa`` (sliding-window KV), ``indexer`` (a DSA-style per-token sidecar) and ``mamba``
(state slots, page size 1). Every page the suite writes is stamped with its pool, key and version
(:func:`~hicache_storage_conformance.pages.page_content`), so a page read back into the wrong pool,
under the wrong key or from an older write is always recognised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from hicache_storage import HiCacheStorageConfig, PoolHitPolicy, PoolTransfer
from hicache_storage.testing import attach_hybrid_pools, make_hybrid_pools, pool_facts, pool_name_str, pool_page_buffers

from . import skips
from .checks import check_pages
from .harness import SENTINEL, Handle, Harness, expect_bools
from .pages import PoolSpec, page_content

__all__ = [
    "SIDECARS",
    "HybridHandle",
    "Sidecar",
    "Verdict",
    "all_pages",
    "block_groups",
    "expected_verdict",
    "open_hybrid",
    "trailing",
]

#: Sidecar pools of the test kit's hybrid model.
SIDECARS = ("swa", "indexer", "mamba")
#: Slots per pool: writes stage pages in the lower half, reads land in the upper half.
POOL_SLOTS = 32
READ_BASE = POOL_SLOTS // 2

#: A pool's part of a v2 call: its keys, or (keys, slots).
Part = Sequence[str] | tuple[Sequence[str], Sequence[int]]


@dataclass(frozen=True)
class Sidecar:
    """One pool's part of a ``batch_exists_v2``: its policy and transfer keys (and block geometry)."""

    pool: str
    policy: PoolHitPolicy
    keys: tuple[str, ...] = ()
    block_pages: int = 0
    group_pages: int = 0

    @property
    def window(self) -> int:
        """A trailing pool's window: ``max(1, len(keys))`` pages."""
        return max(1, len(self.keys))

    def transfer(self) -> PoolTransfer:
        """The :class:`PoolTransfer` describing this pool to ``batch_exists_v2``."""
        return PoolTransfer(
            name=self.pool,
            keys=list(self.keys),
            hit_policy=self.policy,
            block_pages=self.block_pages,
            group_pages=self.group_pages,
        )


def all_pages(pool: str) -> Sidecar:
    """``pool`` must hold every page of a prefix (a DSA indexer)."""
    return Sidecar(pool, PoolHitPolicy.ALL_PAGES)


def trailing(pool: str, window_keys: Sequence[str]) -> Sidecar:
    """``pool`` must hold the last ``len(window_keys)`` pages before a prefix's end (Mamba state, SWA)."""
    return Sidecar(pool, PoolHitPolicy.TRAILING_PAGES, tuple(window_keys))


def block_groups(pool: str, own_keys: Sequence[str], block_pages: int, group_pages: int) -> Sidecar:
    """``pool`` names its own keys, ``group_pages`` per group, each group covering ``block_pages`` KV pages."""
    return Sidecar(pool, PoolHitPolicy.BLOCK_GROUPS, tuple(own_keys), block_pages, group_pages)


@dataclass(frozen=True)
class Verdict:
    """A ``batch_exists_v2`` answer in plain values: pool names as strings, the restorable prefixes as a list.

    A ``restorable_prefix_pages`` of ``None`` means every prefix up to ``kv_hit_pages`` (how SGLang's
    controller reads a backend that reports no sparse set).
    """

    kv_hit_pages: int
    hits: dict[str, int] = field(default_factory=dict)
    restorable: list[int] = field(default_factory=list)

    def describe(self) -> str:
        """One line for assertion messages."""
        return f"kv_hit_pages={self.kv_hit_pages}, extra_pool_hit_pages={self.hits}, restorable={self.restorable}"


def expected_verdict(kv_present: Sequence[bool], pools: Sequence[tuple[Sidecar, Sequence[bool]]]) -> Verdict:
    """What the contract's rules give for these presence flags, computed the plain way.

    ``pools`` pairs each sidecar with its presence flags: one per KV page for ``ALL_PAGES`` and
    ``TRAILING_PAGES`` pools, one per own key for ``BLOCK_GROUPS`` pools.
    """
    kv_pages = next((index for index, there in enumerate(kv_present) if not there), len(kv_present))
    hits: dict[str, int] = {"kv": kv_pages} if kv_pages else {}
    restorable = set(range(1, kv_pages + 1))
    for sidecar, present in pools:
        if not restorable:
            break
        if sidecar.policy is PoolHitPolicy.BLOCK_GROUPS:
            groups = 0
            size = sidecar.group_pages
            while (groups + 1) * size <= len(present) and all(present[groups * size : (groups + 1) * size]):
                groups += 1
            covered = min(kv_pages, groups * sidecar.block_pages)
            if covered:
                hits[sidecar.pool] = covered
            continue
        if sidecar.policy is PoolHitPolicy.ALL_PAGES:
            allowed = {p for p in range(1, kv_pages + 1) if all(present[:p])}
        else:
            w = sidecar.window
            allowed = {p for p in range(1, kv_pages + 1) if all(present[max(0, p - w) : p])}
        if allowed:
            hits[sidecar.pool] = max(allowed)
        restorable &= allowed
    ordered = sorted(restorable)
    return Verdict(ordered[-1] if ordered else 0, hits, ordered)


def _names(result: Any, call: str) -> dict[str, Any]:
    assert isinstance(result, dict), f"{call} returned {type(result).__name__}; expected a dict: pool name -> list"
    plain = {pool_name_str(name): value for name, value in result.items()}
    assert len(plain) == len(result), f"{call} named one pool twice: {list(result)}"
    return plain


class HybridHandle:
    """One backend instance with the hybrid pools registered, and the v2 calls on it."""

    def __init__(self, harness: Harness, handle: Handle, pools: dict[str, Any]) -> None:
        self.harness = harness
        self.handle = handle
        self.pools = pools

    @property
    def backend(self) -> Any:
        """The backend instance."""
        return self.handle.backend

    @property
    def config(self) -> HiCacheStorageConfig:
        """Its config (open a twin with ``open_hybrid(harness, config=...)``)."""
        return self.handle.config

    # ----------------------------------------------------------- pages and slots
    def page_bytes(self, pool: str) -> int:
        """Bytes of one page of ``pool``."""
        return pool_facts(self.pools[pool]).page_bytes

    def content(self, pool: str, key: str, version: int = 0) -> bytes:
        """The page the suite writes for ``key`` at ``version`` in ``pool``."""
        return page_content(f"{pool}/{key}", version, self.page_bytes(pool))

    def expect(self, pool: str, keys: Sequence[str], version: int = 0) -> list[bytes | None]:
        """The pages of ``keys`` in ``pool`` at ``version``."""
        return [self.content(pool, key, version) for key in keys]

    def _segments(self, pool: str, slot: int) -> list[memoryview]:
        host = self.pools[pool]
        return pool_page_buffers(host, [slot * int(host.page_size)])[0]

    def stage(self, pool: str, slot: int, data: bytes) -> None:
        """Copy ``data`` (one page) into slot ``slot`` of ``pool``."""
        offset = 0
        for segment in self._segments(pool, slot):
            segment[:] = data[offset : offset + segment.nbytes]
            offset += segment.nbytes

    def slot_bytes(self, pool: str, slot: int) -> bytes:
        """The bytes in slot ``slot`` of ``pool``."""
        return b"".join(bytes(segment) for segment in self._segments(pool, slot))

    def indices(self, pool: str, slots: Sequence[int]) -> torch.Tensor:
        """Host indices of ``slots`` in ``pool`` (``page_size`` per slot; 1 for the state pool)."""
        size = int(self.pools[pool].page_size)
        base = torch.tensor(list(slots), dtype=torch.int64)[:, None] * size
        return (base + torch.arange(size, dtype=torch.int64)).reshape(-1)

    def transfer(self, pool: str, keys: Sequence[str], slots: Sequence[int]) -> PoolTransfer:
        """A :class:`PoolTransfer` moving ``keys`` to or from ``slots`` of ``pool``."""
        return PoolTransfer(name=pool, host_indices=self.indices(pool, slots), keys=list(keys))

    @staticmethod
    def _split(part: Part, base: int) -> tuple[list[str], list[int]]:
        if isinstance(part, tuple) and len(part) == 2 and not isinstance(part[0], str):
            keys, slots = cast("tuple[Sequence[str], Sequence[int]]", part)
            return list(keys), list(slots)
        names = [str(key) for key in part]
        return names, list(range(base, base + len(names)))

    # ----------------------------------------------------------- v2 calls
    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.backend, name)(*args)
        except NotImplementedError:
            if self.harness.sdk:
                raise
            self.harness.skip(
                skips.SURFACE,
                f"{type(self.backend).__name__} does not implement {name} (SGLang's base raises)",
                f"implement {name}",
            )

    def put(self, writes: Mapping[str, Part], version: int = 0) -> dict[str, list[bool]]:
        """Stage each pool's pages (slots 0.. unless given) and ``batch_set_v2`` them, in the mapping's order."""
        transfers = []
        counts: dict[str, int] = {}
        for pool, part in writes.items():
            keys, slots = self._split(part, 0)
            for key, slot in zip(keys, slots):
                self.stage(pool, slot, self.content(pool, key, version))
            transfers.append(self.transfer(pool, keys, slots))
            counts[pool] = len(keys)
        result = _names(self._call("batch_set_v2", transfers), "batch_set_v2")
        assert set(result) == set(counts), f"batch_set_v2 answered for pools {sorted(result)}, asked {sorted(counts)}"
        return {pool: expect_bools(result[pool], counts[pool], f"batch_set_v2[{pool}]") for pool in counts}

    def load(self, reads: Mapping[str, Part]) -> dict[str, list[bytes | None]]:
        """``batch_get_v2`` into sentinel-filled slots (upper half unless given): bytes per hit, ``None`` per miss."""
        transfers = []
        plan: dict[str, tuple[list[str], list[int]]] = {}
        for pool, part in reads.items():
            keys, slots = self._split(part, READ_BASE)
            fill = bytes([SENTINEL]) * self.page_bytes(pool)
            for slot in slots:
                self.stage(pool, slot, fill)
            transfers.append(self.transfer(pool, keys, slots))
            plan[pool] = (keys, slots)
        result = _names(self._call("batch_get_v2", transfers), "batch_get_v2")
        assert set(result) == set(plan), f"batch_get_v2 answered for pools {sorted(result)}, asked {sorted(plan)}"
        out: dict[str, list[bytes | None]] = {}
        for pool, (keys, slots) in plan.items():
            hits = expect_bools(result[pool], len(keys), f"batch_get_v2[{pool}]")
            out[pool] = [self.slot_bytes(pool, slot) if hit else None for hit, slot in zip(hits, slots)]
        return out

    def exists_v2(self, keys: Sequence[str], *sidecars: Sidecar) -> Verdict:
        """``batch_exists_v2(keys, [sidecars])``, checked for shape and turned into a :class:`Verdict`."""
        result = self._call("batch_exists_v2", list(keys), [sidecar.transfer() for sidecar in sidecars])
        assert result is not None, "batch_exists_v2 returned None; expected a PoolTransferResult"
        kv_hit = getattr(result, "kv_hit_pages", None)
        assert isinstance(kv_hit, int) and not isinstance(kv_hit, bool), (
            f"batch_exists_v2: kv_hit_pages is {kv_hit!r}; expected an int"
        )
        hits = _names(getattr(result, "extra_pool_hit_pages", None), "batch_exists_v2 extra_pool_hit_pages")
        bad = {name: value for name, value in hits.items() if not isinstance(value, int) or isinstance(value, bool)}
        assert not bad, f"batch_exists_v2: extra_pool_hit_pages values must be ints, got {bad}"
        raw = getattr(result, "restorable_prefix_pages", None)
        restorable = list(range(1, kv_hit + 1)) if raw is None else list(raw)
        assert all(isinstance(p, int) and not isinstance(p, bool) for p in restorable), (
            f"batch_exists_v2: restorable_prefix_pages must be ints, got {restorable!r}"
        )
        assert restorable == sorted(set(restorable)), (
            f"batch_exists_v2: restorable_prefix_pages must be ascending without repeats, got {restorable}"
        )
        assert all(1 <= p <= len(keys) for p in restorable), (
            f"batch_exists_v2: restorable_prefix_pages {restorable} outside 1..{len(keys)}"
        )
        assert kv_hit == (restorable[-1] if restorable else 0), (
            f"batch_exists_v2: kv_hit_pages={kv_hit} is not the largest restorable prefix of {restorable}"
        )
        return Verdict(kv_hit, hits, restorable)

    def kv_exists(self, keys: Sequence[str]) -> list[bool]:
        """Per-key existence of KV pages (``batch_exists_each``, or ``exists`` per key on SGLang's surface)."""
        return self.handle.exists_each(keys)

    # ----------------------------------------------------------- checks
    def check_pages(
        self,
        pool: str,
        got: Sequence[bytes | None],
        keys: Sequence[str],
        versions: int | Sequence[int | None],
        what: str,
    ) -> None:
        """Each page of ``pool`` read back is its key's page at its version (``None``: a miss is due);
        raises :class:`~hicache_storage_conformance.checks.Mismatch` naming the first wrong page."""
        labels = [f"{pool}/{key}" for key in keys]
        may_evict = self.harness.caps.may_evict
        check_pages(got, keys, versions, f"{what} (pool {pool!r})", may_evict=may_evict, labels=labels)

    def same(self, got: Sequence[bytes | None], expected: Sequence[bytes | None]) -> bool:
        """Page-by-page equality; a miss for a hit is accepted when the backend ``may_evict``."""
        return self.handle.same(got, expected)

    def check_loadable(
        self, keys: Sequence[str], sidecars: Sequence[Sidecar], verdict: Verdict, version: int = 0
    ) -> None:
        """Every prefix the verdict calls restorable loads byte-exact: KV pages and each gating pool's pages."""
        for prefix in verdict.restorable:
            reads: dict[str, list[str]] = {"kv": list(keys[:prefix])}
            for sidecar in sidecars:
                if sidecar.policy is PoolHitPolicy.ALL_PAGES:
                    reads[sidecar.pool] = list(keys[:prefix])
                elif sidecar.policy is PoolHitPolicy.TRAILING_PAGES:
                    reads[sidecar.pool] = list(keys[max(0, prefix - sidecar.window) : prefix])
            got = self.load(reads)
            for pool, wanted in reads.items():
                assert self.same(got[pool], self.expect(pool, wanted, version)), (
                    f"batch_exists_v2 called prefix {prefix} restorable ({verdict.describe()}), but pool {pool!r} "
                    f"did not load byte-exact: hits {[page is not None for page in got[pool]]}"
                )

    # ----------------------------------------------------------- primitive interposition (SDK surface)
    @contextlib.contextmanager
    def interpose(self, primitive: str, wrapper: Callable[..., list[bool]]) -> Iterator[None]:
        """Route the instance's ``primitive`` through ``wrapper(original, keys, payload_or_context, *rest)``.

        Only the SDK surface has primitives; the base class looks them up on the instance per call.
        """
        self.harness.require_sdk("fault injection into backend primitives")
        with self.handle.interpose(primitive, wrapper):
            yield

    def storage_keys(self, pool: str, keys: Sequence[str]) -> set[str]:
        """The storage keys ``keys`` have in ``pool`` (SDK surface)."""
        space = self.backend.pool_keyspace(pool)
        return {space.storage_key(key) for key in keys}


def _register(harness: Harness, backend: Any, pools: Mapping[str, Any], finish: bool) -> None:
    if harness.sdk:
        if finish:
            attach_hybrid_pools(backend, pools)
            return
        backend.register_mem_pool_host(pools["kv"])
        for name, pool in pools.items():
            if name != "kv":
                backend.register_mem_host_pool_v2(pool, name)
        return
    # SGLang's hybrid controller: the anchor first, then every entry of the pool group (the anchor too).
    backend.register_mem_pool_host(pools["kv"])
    for name, pool in pools.items():
        backend.register_mem_host_pool_v2(pool, name)
    done = getattr(backend, "on_host_pools_registered", None)
    if finish and callable(done):
        done()


def open_hybrid(
    harness: Harness,
    *,
    config: HiCacheStorageConfig | None = None,
    replace: Mapping[str, Any] | None = None,
    finish: bool = True,
    extra: dict[str, Any] | None = None,
) -> HybridHandle:
    """An instance with the test kit's hybrid pools registered the way SGLang's hybrid controller does.

    ``replace`` swaps pools (name -> host pool) before registration; ``finish=False`` leaves out
    ``on_host_pools_registered()``; ``extra`` merges into the config's ``extra_config``.
    Skips when the class has no v2 surface.
    """
    if not harness.target.has_v2:
        harness.skip(
            skips.SURFACE,
            "the class defines no register_mem_host_pool_v2/batch_get_v2/batch_set_v2/batch_exists_v2",
            "define the multi-pool (v2) calls, or implement hicache_storage.plugin.Backend (the SDK serves them)",
        )
    pools = dict(make_hybrid_pools(num_pages=POOL_SLOTS))
    pools.update(replace or {})
    config = config or harness.config(extra=extra)
    backend, faults = harness.construct(config)
    try:
        _register(harness, backend, pools, finish)
    except BaseException:
        close = getattr(backend, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()
        raise
    handle = harness.adopt(backend, pools["kv"], PoolSpec(layer_num=3, num_pages=POOL_SLOTS), config, faults=faults)
    handle.sidecars = tuple(name for name in pools if name != "kv")
    return HybridHandle(harness, handle, pools)
