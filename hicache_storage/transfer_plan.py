"""Validate a v2 call's transfers into per-pool steps before any byte moves.

Every rule of a malformed request is checked here, for every transfer, so a bad transfer anywhere
in a call raises :class:`~hicache_storage.errors.InvalidRequestError` naming its pool while
nothing has been read or written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequestError
from .keys import validate_keys
from .pool_registry import PoolRegistry, RegisteredPool
from .pools import PoolHitPolicy, pool_name_str

__all__ = ["ExistsStep", "TransferStep", "hit_policy_of", "plan_exists", "plan_transfers"]


@dataclass(frozen=True)
class TransferStep:
    """One pool's part of a ``batch_get_v2``/``batch_set_v2``: its keys and first slots."""

    name: Any
    entry: RegisteredPool
    keys: list[str]
    starts: list[int]


@dataclass(frozen=True)
class ExistsStep:
    """One sidecar pool's part of a ``batch_exists_v2``."""

    name: Any
    entry: RegisteredPool
    policy: PoolHitPolicy
    keys: list[str]
    window: int
    block_pages: int
    group_pages: int


def hit_policy_of(transfer: Any) -> PoolHitPolicy:
    """The transfer's hit policy as ours; an unknown one raises :class:`InvalidRequestError`."""
    raw = getattr(transfer, "hit_policy", PoolHitPolicy.ALL_PAGES)
    try:
        return PoolHitPolicy(pool_name_str(raw))
    except ValueError:
        allowed = ", ".join(policy.value for policy in PoolHitPolicy)
        pool = pool_name_str(getattr(transfer, "name", "?"))
        raise InvalidRequestError(f"pool {pool!r}: unknown hit_policy {raw!r}; expected one of {allowed}") from None


def _keys_of(transfer: Any, pool: str) -> list[str]:
    try:
        return validate_keys(list(transfer.keys or []))
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"pool {pool!r}: {exc}") from None
    except TypeError:
        raise InvalidRequestError(f"pool {pool!r}: keys must be a list of str, got {transfer.keys!r}") from None


def _window_keys(transfer: Any, pool: str) -> list[str]:
    keys = transfer.keys or []
    if isinstance(keys, (str, bytes)) or not hasattr(keys, "__len__"):
        raise InvalidRequestError(f"pool {pool!r}: keys must be a list, got {type(keys).__name__}")
    return list(keys)


def _named(transfer: Any) -> Any:
    if not hasattr(transfer, "name"):
        raise InvalidRequestError(f"each transfer needs a pool name (a PoolTransfer), got {type(transfer).__name__}")
    return transfer.name


def plan_transfers(pools: PoolRegistry, transfers: Sequence[Any]) -> list[TransferStep]:
    """Steps for ``transfers``; raises :class:`InvalidRequestError` for any malformed transfer."""
    if isinstance(transfers, (str, bytes)) or not isinstance(transfers, Sequence):
        raise InvalidRequestError(f"transfers must be a list of PoolTransfer, got {type(transfers).__name__}")
    steps: list[TransferStep] = []
    for transfer in transfers:
        name = _named(transfer)
        entry = pools.get(name)
        keys = _keys_of(transfer, entry.name)
        if keys and entry.holds_no_bytes:
            raise InvalidRequestError(f"pool {entry.name!r} holds no bytes (its kv_buffer is None): nothing to move")
        starts = entry.page_starts(len(keys), transfer.host_indices)
        steps.append(TransferStep(name, entry, keys, starts))
    return steps


def plan_exists(pools: PoolRegistry, transfers: Sequence[Any] | None) -> list[ExistsStep]:
    """Steps for ``batch_exists_v2``'s ``pool_transfers``; raises :class:`InvalidRequestError`."""
    steps: list[ExistsStep] = []
    for transfer in transfers or ():
        name = _named(transfer)
        entry = pools.get(name)
        policy = hit_policy_of(transfer)
        # Only a BLOCK_GROUPS pool is looked up under its own keys; for the others the keys only size the
        # window (SGLang's prefetch query sends placeholders such as "__placeholder__" there).
        keys = (
            _keys_of(transfer, entry.name)
            if policy is PoolHitPolicy.BLOCK_GROUPS
            else _window_keys(transfer, entry.name)
        )
        block_pages = int(getattr(transfer, "block_pages", 0) or 0)
        group_pages = int(getattr(transfer, "group_pages", 0) or 0)
        if policy is PoolHitPolicy.BLOCK_GROUPS and (block_pages < 1 or group_pages < 1):
            raise InvalidRequestError(
                f"pool {entry.name!r}: BLOCK_GROUPS needs block_pages >= 1 and group_pages >= 1, "
                f"got block_pages={block_pages}, group_pages={group_pages}"
            )
        steps.append(ExistsStep(name, entry, policy, keys, max(1, len(keys)), block_pages, group_pages))
    return steps
