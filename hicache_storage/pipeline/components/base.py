"""What every pool component of the pipeline has: pools, a hit rule, owner-tagged host units.

A *component* is one pool the pipeline moves between device, host and storage: the KV pool (the
anchor: its page hashes define the prefix) or a sidecar (SWA window KV, Mamba state, ...). A
component's *unit* is one page of its host pool (``unit_tokens`` slots: a KV or SWA page, or one
state slot). Every unit sits at a KV page position and is stored under the KV page hash of that
position, in the component's own key space (the backend maps it).

Each component says, in its own module, which positions a backup of a span writes
(:meth:`Component.backup_positions`) and which a restore of a prefix needs
(:meth:`Component.restore_positions`); the stages only iterate over components.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import torch

from ...errors import ConfigError, InvalidRequestError
from ...free_list import FreeList
from ...keys import validate_key
from ...pools import PoolHitPolicy
from ..copy_engine import CopyHandle
from ..device_pool import tokens_to_pages

__all__ = ["Component", "Copier", "DevicePool", "UnitStaging"]


class DevicePool(Protocol):
    """What the pipeline needs from a component's device pool (``DeviceKVPool``, ``DeviceStatePool``)."""

    page_size: int
    page_num: int
    size: int
    bytes_per_page: int
    device: torch.device

    @property
    def free_pages(self) -> int: ...

    def alloc(self, num_tokens: int, owner: object = None) -> torch.Tensor | None: ...

    def alloc_pages(self, count: int, owner: object = None) -> list[int] | None: ...

    def free(self, indices: Sequence[int] | torch.Tensor) -> int: ...

    def owners(self) -> dict[int, Any]: ...


class Copier(Protocol):
    """Unit copies between a component's device pool and its host pool."""

    def device_to_host(self, device_pages: Sequence[int], host_pages: Sequence[int]) -> CopyHandle: ...

    def host_to_device(self, host_pages: Sequence[int], device_pages: Sequence[int]) -> CopyHandle: ...


class Component(ABC):
    """One pool of the pipeline: its device pool, its hit policy and window, and its position rules.

    ``name`` is the pool name the backend knows it by (``register_mem_host_pool_v2``). ``window``
    is the trailing window in pages for ``TRAILING_PAGES`` components. Every component gates: a
    prefix is restorable only where its units exist.
    """

    policy: ClassVar[PoolHitPolicy] = PoolHitPolicy.TRAILING_PAGES
    #: Short kind name used in reports (``kv``, ``swa``, ``mamba``).
    kind: ClassVar[str] = "component"
    #: Whether a unit is one KV page's worth of tokens (its pool's pages must match the KV pages).
    kv_aligned: ClassVar[bool] = False

    def __init__(self, name: str, device: Any, window: int = 1) -> None:
        try:
            validate_key(name)
        except InvalidRequestError as exc:
            raise ConfigError("components", f"{name!r} cannot name a pool: {exc}") from None
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigError(f"component {name!r}", f"window must be a positive number of pages, got {window!r}")
        self.name = name
        self.device: DevicePool = device
        self.window = window

    # ------------------------------------------------------------ geometry
    @property
    def unit_tokens(self) -> int:
        """Slots per unit (the device and host pools' ``page_size``)."""
        return int(self.device.page_size)

    @property
    def unit_bytes(self) -> int:
        """Bytes per unit."""
        return int(self.device.bytes_per_page)

    def host_units_for(self, ratio: float) -> int:
        """Host units for a host/device ratio (at least one)."""
        return max(1, math.ceil(self.device.page_num * ratio))

    # ------------------------------------------------------------ rules
    def backup_positions(self, begin: int, end: int) -> range:
        """Positions (KV page indices) a backup of the span ``[begin, end)`` writes: the trailing window."""
        return range(max(begin, end - self.window), end)

    def restore_positions(self, start: int, end: int) -> range:
        """Positions needed to restore the prefix of ``end`` pages when the device holds ``start``."""
        return range(max(0, end - self.window), end)

    def min_transfer_units(self) -> int:
        """Units of the smallest useful transfer (one restore)."""
        return self.window

    def unit_numbers(self, indices: torch.Tensor) -> list[int]:
        """Unit numbers of unit-aligned slot indices as this component's pools hand them out (unchecked)."""
        step = self.unit_tokens
        units: list[int] = indices.tolist() if step == 1 else [t // step for t in indices[::step].tolist()]
        return units

    def device_units(self, indices: torch.Tensor | Sequence[int], wanted: int, what: str) -> list[int]:
        """Device units of ``indices`` (slot indices, unit aligned): the last ``wanted`` of them.

        Raises :class:`InvalidRequestError` unless they are whole units and at least ``wanted``.
        """
        units = tokens_to_pages(indices, self.unit_tokens, self.device.size)
        if len(units) < wanted:
            raise InvalidRequestError(f"{what}: {self.name!r} needs {wanted} units, got {len(units)}")
        return units[len(units) - wanted :]

    # ------------------------------------------------------------ pools
    @abstractmethod
    def make_host_pool(self, units: int) -> Any:
        """A host pool of ``units`` units with the device pool's geometry."""

    @abstractmethod
    def copier(self, host_pool: Any) -> Copier:
        """The copy engine between the device pool and ``host_pool``."""

    def describe(self) -> dict[str, Any]:
        """Name, kind, policy, window and geometry as plain values."""
        return {
            "name": self.name,
            "kind": self.kind,
            "policy": self.policy.value,
            "window_pages": self.window,
            "unit_tokens": self.unit_tokens,
            "unit_bytes": self.unit_bytes,
            "device_units": self.device.page_num,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, window={self.window}, device={self.device!r})"


class UnitStaging(FreeList):
    """Owner-tagged allocation of one component's host units, from an arena the pipeline reserves.

    At construction every slot of the host pool is allocated once, under the owner
    ``("staging", component name)``; units are then handed to operations from this free list
    (a unit is one host page: ``unit_tokens`` slots; :meth:`alloc` and :meth:`release` as
    :class:`~hicache_storage.free_list.FreeList`'s), each with its operation's owner tag, and taken
    back at the operation's end. Sub-allocating avoids one pool call per operation, which costs
    more than the rest of a sidecar's bookkeeping, and works for any host pool
    (``alloc(count * unit_tokens, owner)`` / ``free`` / ``available_size()``), whether it records
    owners or not.
    """

    def __init__(self, component: Component, pool: Any) -> None:
        self.component = component
        self.pool = pool
        self.unit_tokens = component.unit_tokens
        self.units = int(pool.size) // self.unit_tokens
        self.arena_owner = ("staging", component.name)
        reserved = pool.alloc(self.units * self.unit_tokens, owner=self.arena_owner)
        if reserved is None:
            raise ConfigError(
                f"component {component.name!r}",
                "its host pool has slots allocated already; the pipeline needs all of it",
            )
        super().__init__(self.units, f"{component.name} units")

    def problems(self) -> str | None:
        """What is wrong with the arena's own accounting (``None`` when nothing is)."""
        problem = super().problems()
        if problem is not None:
            return problem
        if int(self.pool.available_size()) != 0:
            return f"the host pool has {self.pool.available_size()} slots outside the pipeline's arena"
        owners = getattr(self.pool, "owners", None)
        if callable(owners) and set(owners().values()) != {self.arena_owner}:
            return "host pool slots are allocated to someone other than the pipeline's arena"
        return None
