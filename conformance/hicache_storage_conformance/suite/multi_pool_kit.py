"""Helpers of the multi_pool tests: other geometries, verdict checks, primitive faults, server recovery."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from hicache_storage import BackendFault, HostStatePool, InvalidRequestError, PoolTransfer
from hicache_storage.testing import make_pool as kit_pool

from ..checks import Mismatch, check, check_equal, describe_page
from ..hooks import SideChannelUnavailable
from ..hybrid import POOL_SLOTS, HybridHandle, Verdict
from .faults import CALL_LIMIT_S, RECOVERY_S

__all__ = [
    "F",
    "T",
    "failing_writes",
    "faulting",
    "miss_or_exact",
    "nothing_stored",
    "other_geometry",
    "recover",
    "rejects",
    "staged",
    "stop_after",
    "timed",
    "verdict_is",
]

T, F = True, False
RULE_V2 = "batch_exists_v2 follows the multi-pool hit rules (docs/contract.md, Multi-pool calls)"


def other_geometry(pool: str) -> Any:
    """A host pool for ``pool`` with the same bytes per page but another geometry (a model that differs)."""
    if pool == "swa":  # 2 heads of 8 -> 1 head of 16
        return kit_pool(num_pages=POOL_SLOTS, layer_num=1, head_num=1, head_dim=16, seed=None)
    if pool == "indexer":  # 1 layer of 8 -> 2 layers of 4
        return kit_pool("page_first", True, num_pages=POOL_SLOTS, layer_num=2, kv_cache_dim=4, seed=None)
    return HostStatePool(num_slots=POOL_SLOTS, layer_num=2, temporal_shape=(4, 4), conv_shapes=((3, 4), (2, 4)))


def verdict_is(hh: HybridHandle, got: Verdict, want: Verdict, what: str) -> None:
    check(
        got == want or hh.harness.caps.may_evict,
        f"batch_exists_v2 ({what})",
        want.describe(),
        got.describe(),
        rule=RULE_V2,
    )


def rejects(call: Callable[[], Any], what: str, error: type[Exception] = InvalidRequestError) -> None:
    try:
        result = call()
    except error:
        return
    except Exception as exc:
        raise Mismatch(what, error.__name__, f"{type(exc).__name__}: {exc}") from exc
    raise Mismatch(what, f"{error.__name__} raised before anything moved", f"it returned {result!r}")


def pool_of(hh: HybridHandle, storage_key: str) -> str:
    for name in hh.pools:
        if storage_key.startswith(hh.backend.pool_keyspace(name).prefix):
            return name
    raise AssertionError(f"storage key {storage_key!r} belongs to no registered pool")


@contextmanager
def failing_writes(hh: HybridHandle, doomed: dict[str, Sequence[str]]) -> Iterator[None]:
    """``write_pages`` stores every page but the doomed ones and reports ``False`` for those."""
    skipped = set().union(*(hh.storage_keys(pool, keys) for pool, keys in doomed.items()))

    def write(original: Callable[..., list[bool]], keys: list[str], pages: list[Any], *rest: Any) -> list[bool]:
        keep = [index for index, key in enumerate(keys) if key not in skipped]
        out = [False] * len(keys)
        if keep:
            done = original([keys[i] for i in keep], [pages[i] for i in keep], *rest)
            for index, ok in zip(keep, done):
                out[index] = ok
        return out

    with hh.interpose("write_pages", write):
        yield


@contextmanager
def faulting(hh: HybridHandle, pool: str, primitives: Sequence[str]) -> Iterator[None]:
    """The named primitives raise a :class:`BackendFault` for ``pool``'s pages (and work for the others)."""

    def fault(original: Callable[..., list[bool]], keys: list[str], *rest: Any) -> list[bool]:
        if keys and pool_of(hh, keys[0]) == pool:
            raise BackendFault(f"injected fault in pool {pool!r}")
        return original(keys, *rest)

    with ExitStack() as stack:
        for name in primitives:
            stack.enter_context(hh.interpose(name, fault))
        yield


@contextmanager
def stop_after(hh: HybridHandle, primitive: str, pool: str, errors: list[Exception]) -> Iterator[None]:
    """Stop the server (the test class's hook) right after ``pool``'s ``primitive`` call returns."""

    def stop(original: Callable[..., list[bool]], keys: list[str], *rest: Any) -> list[bool]:
        out = original(keys, *rest)
        if keys and pool_of(hh, keys[0]) == pool and hh.handle not in hh.harness.stopped:
            try:
                hh.harness.stop_server(hh.handle)
            except SideChannelUnavailable as exc:
                errors.append(exc)
        return out

    with hh.interpose(primitive, stop):
        yield


def timed(what: str, call: Callable[[], Any]) -> Any:
    begin = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        raise Mismatch(f"{what} with the server stopped", "misses / False", f"{type(exc).__name__}: {exc}") from exc
    took = time.monotonic() - begin
    check(
        took <= CALL_LIMIT_S, f"{what} with the server stopped", f"an answer within {CALL_LIMIT_S:.0f}s", f"{took:.1f}s"
    )
    return result


def recover(hh: HybridHandle, keys: Sequence[str]) -> None:
    hh.harness.start_server(hh.handle)
    deadline = time.monotonic() + RECOVERY_S
    while hh.put({"kv": keys, "mamba": keys}, version=9) != {"kv": [T] * len(keys), "mamba": [T] * len(keys)}:
        check(time.monotonic() < deadline, "v2 writes after the restart", f"working within {RECOVERY_S:.0f}s", "not")
        time.sleep(0.05)


def miss_or_exact(hh: HybridHandle, pool: str, keys: Sequence[str], versions: Sequence[int], what: str) -> None:
    got = hh.load({pool: list(keys)})[pool]
    for key, page in zip(keys, got):
        check(
            page is None or page in [hh.content(pool, key, v) for v in versions],
            f"{what}: reading it from pool {pool!r}",
            f"a miss or version {'/'.join(map(str, versions))} byte-exact",
            describe_page(page, key, versions[0], label=f"{pool}/{key}"),
        )


def staged(hh: HybridHandle, pools: dict[str, list[str]]) -> list[PoolTransfer]:
    transfers = []
    for pool, keys in pools.items():
        slots = list(range(len(keys)))
        for key, slot in zip(keys, slots):
            hh.stage(pool, slot, hh.content(pool, key))
        transfers.append(hh.transfer(pool, keys, slots))
    return transfers


def nothing_stored(hh: HybridHandle, keys: list[str], pools: Sequence[str], what: str) -> None:
    check_equal(hh.kv_exists(keys), [F] * len(keys), f"{what}: exists of its KV pages")
    for pool in pools:
        if pool != "kv":
            check_equal(hh.load({pool: keys}), {pool: [None] * len(keys)}, f"{what}: reading its {pool} pages")
