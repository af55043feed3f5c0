"""Validate a v2 call's transfers into per-pool steps before any byte moves.

Every rule of a malformed request is checked here, for every transfer, with the rules of the v1
calls (keys a list or tuple of valid ``str``, host indices matching the keys, numeric fields
finite integers). :func:`plan_transfers` reports each malformed transfer beside the good ones, so
the caller API can refuse the whole call before moving a byte while the SGLang adapter fails only
the malformed transfer, as SGLang's own backends do.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError
from ..keys import validate_keys
from .names import PoolHitPolicy, pool_name_str
from .registry import PoolRegistry, RegisteredPool

__all__ = ["ExistsStep", "PlannedTransfer", "TransferStep", "hit_policy_of", "plan_exists", "plan_transfers"]


@dataclass(frozen=True)
class TransferStep:
    """One pool's part of a ``batch_get_v2``/``batch_set_v2``: its keys and first slots."""

    name: Any
    entry: RegisteredPool
    keys: list[str]
    starts: list[int]


@dataclass(frozen=True)
class PlannedTransfer:
    """One transfer of a v2 call: its step, or the error that makes it malformed.

    ``name`` is the transfer's own name object (``None`` when it has none); ``pages`` is how many
    results it is owed (its key count where one can be read, else 0).
    """

    name: Any
    step: TransferStep | None
    error: InvalidRequestError | None
    pages: int


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
    keys = transfer.keys
    try:
        return validate_keys([] if keys is None else keys)
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"pool {pool!r}: {exc}") from None


def _window_keys(transfer: Any, pool: str) -> list[str]:
    """A trailing-window transfer's keys: only their count matters (SGLang sends placeholders)."""
    keys = [] if transfer.keys is None else transfer.keys
    if not isinstance(keys, (list, tuple)) or not all(isinstance(key, str) for key in keys):
        raise InvalidRequestError(f"pool {pool!r}: keys must be a list of str, got {type(keys).__name__}")
    return list(keys)


def _count_field(transfer: Any, field: str, pool: str) -> int:
    """A numeric field of ``transfer`` as a finite int (absent or ``None``: 0)."""
    value = getattr(transfer, field, 0)
    if value is None:
        return 0
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    try:
        if isinstance(value, bool):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise InvalidRequestError(f"pool {pool!r}: {field} must be a finite integer, got {value!r}") from None


def _named(transfer: Any) -> Any:
    if not hasattr(transfer, "name"):
        raise InvalidRequestError(f"each transfer needs a pool name (a PoolTransfer), got {type(transfer).__name__}")
    return transfer.name


def _key_count(transfer: Any) -> int:
    keys = getattr(transfer, "keys", None)
    return len(keys) if isinstance(keys, (list, tuple)) else 0


def _step(pools: PoolRegistry, transfer: Any) -> TransferStep:
    name = _named(transfer)
    entry = pools.get(name)
    keys = _keys_of(transfer, entry.name)
    if keys and entry.holds_no_bytes:
        raise InvalidRequestError(f"pool {entry.name!r} holds no bytes (its kv_buffer is None): nothing to move")
    starts = entry.page_starts(len(keys), getattr(transfer, "host_indices", None))
    return TransferStep(name, entry, keys, starts)


def plan_transfers(pools: PoolRegistry, transfers: Sequence[Any]) -> list[PlannedTransfer]:
    """One :class:`PlannedTransfer` per transfer; raises :class:`InvalidRequestError` only when
    ``transfers`` itself is not a list or tuple."""
    if not isinstance(transfers, (list, tuple)):
        raise InvalidRequestError(f"transfers must be a list of PoolTransfer, got {type(transfers).__name__}")
    planned: list[PlannedTransfer] = []
    for transfer in transfers:
        name = getattr(transfer, "name", None)
        try:
            step = _step(pools, transfer)
        except InvalidRequestError as error:
            planned.append(PlannedTransfer(name, None, error, _key_count(transfer)))
        else:
            planned.append(PlannedTransfer(name, step, None, len(step.keys)))
    return planned


def plan_exists(pools: PoolRegistry, transfers: Sequence[Any] | None) -> list[ExistsStep]:
    """Steps for ``batch_exists_v2``'s ``pool_transfers``; raises :class:`InvalidRequestError`."""
    if transfers is not None and not isinstance(transfers, (list, tuple)):
        raise InvalidRequestError(f"pool_transfers must be a list of PoolTransfer, got {type(transfers).__name__}")
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
        block_pages = _count_field(transfer, "block_pages", entry.name)
        group_pages = _count_field(transfer, "group_pages", entry.name)
        if policy is PoolHitPolicy.BLOCK_GROUPS and (block_pages < 1 or group_pages < 1):
            raise InvalidRequestError(
                f"pool {entry.name!r}: BLOCK_GROUPS needs block_pages >= 1 and group_pages >= 1, "
                f"got block_pages={block_pages}, group_pages={group_pages}"
            )
        steps.append(ExistsStep(name, entry, policy, keys, max(1, len(keys)), block_pages, group_pages))
    return steps
