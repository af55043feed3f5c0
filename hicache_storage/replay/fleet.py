"""A fleet of deployments of one model at several TP sizes over one shared store (``replay --fleet``).

``--fleet tp2:2,tp4:1`` is two TP2 replicas and one TP4 replica; requests go to the replicas in
turn. Every rank of a replica runs (its host pool holds ``kv_heads / tp_size`` heads, and it stores
its own head shards); a replica's figures are its rank 0's (its ranks serve the same requests from
the same pages, so they hit alike). The fleet runs twice, with head shards off (every
key carries the tp rank and size: a replica reads only pages of its own TP size) and on
(``tp_lcm_size`` = the least common multiple of the fleet's TP sizes: every replica reads what any
wrote), and reports per TP size the storage hits and TTFT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..config import make_config
from ..contract import HiCacheStorage
from ..registry import load_backend
from .config import EngineConfig
from .engine import ReplayEngine
from .report import percentiles
from .trace import TraceRequest

__all__ = ["Deployment", "fleet_lcm", "parse_fleet", "run_fleet"]

_ITEM = re.compile(r"tp(\d+):(\d+)")


@dataclass(frozen=True)
class Deployment:
    """``replicas`` deployments at TP size ``tp_size``."""

    tp_size: int
    replicas: int


def parse_fleet(text: str) -> list[Deployment]:
    """``"tp2:2,tp4:1"`` as deployments; :class:`ValueError` naming the bad item otherwise."""
    fleet = []
    for item in (part.strip() for part in text.split(",")):
        match = _ITEM.fullmatch(item)
        if match is None or int(match.group(1)) < 1 or int(match.group(2)) < 1:
            raise ValueError(f"--fleet item {item!r}: expected tp<SIZE>:<REPLICAS>, e.g. tp2:2,tp4:1")
        fleet.append(Deployment(int(match.group(1)), int(match.group(2))))
    return fleet


def fleet_lcm(fleet: Sequence[Deployment]) -> int:
    """The least common multiple of the fleet's TP sizes (its ``tp_lcm_size``)."""
    return math.lcm(*(deployment.tp_size for deployment in fleet))


def _check(fleet: Sequence[Deployment], config: EngineConfig) -> None:
    heads, lcm = config.shape.kv_heads, fleet_lcm(fleet)
    if config.mode != "cache":
        raise ValueError("--fleet replays mode cache")
    if heads % lcm:
        raise ValueError(
            f"--fleet needs the model's KV heads ({heads}) to divide by the TP sizes' least common multiple ({lcm}); "
            "set them with --model-shape layers,kv_heads,head_dim,dtype"
        )


def run_fleet(
    requests: Sequence[TraceRequest],
    config: EngineConfig,
    fleet: Sequence[Deployment],
    backend: str,
    backend_options: dict[str, Any],
    *,
    share: bool,
) -> dict[str, Any]:
    """Replay ``requests`` over the fleet, head shards on (``share``) or off; per TP size hits and TTFT."""
    _check(fleet, config)
    extra = {**backend_options, **({"tp_lcm_size": fleet_lcm(fleet)} if share else {})}
    replicas: list[tuple[int, list[ReplayEngine]]] = []
    instances: list[HiCacheStorage] = []
    try:
        for deployment in fleet:
            tp_size = deployment.tp_size
            shape = replace(config.shape, kv_heads=config.shape.kv_heads // tp_size)
            for _ in range(deployment.replicas):
                ranks = []
                for rank in range(tp_size):
                    storage = load_backend(
                        backend, make_config("replay", tp_rank=rank, tp_size=tp_size, extra_config=dict(extra))
                    )
                    instances.append(storage)
                    ranks.append(ReplayEngine(replace(config, shape=shape), storage))
                replicas.append((tp_size, ranks))
        for storage in instances:
            if storage.capabilities.supports_clear:
                storage.clear()
        for number, request in enumerate(requests):
            for engine in replicas[number % len(replicas)][1]:
                engine.step(request)
        engines = [(tp_size, ranks[0]) for tp_size, ranks in replicas]
        return {"share": share, "tp_lcm_size": extra.get("tp_lcm_size"), "by_tp": _by_tp(engines)}
    finally:
        for storage in instances:
            if storage.capabilities.supports_clear:
                storage.clear()
            storage.close()


def _by_tp(engines: list[tuple[int, ReplayEngine]]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for tp_size in sorted({tp for tp, _ in engines}):
        records = [record for tp, engine in engines if tp == tp_size for record in engine.records]
        tokens = sum(record.input_tokens for record in records) or 1
        rows[f"tp{tp_size}"] = {
            "requests": len(records),
            "storage_hit_rate": sum(record.storage_tokens for record in records) / tokens,
            "cached_hit_rate": sum(r.device_tokens + r.host_tokens + r.storage_tokens for r in records) / tokens,
            "ttft_s": percentiles([record.ttft_seconds for record in records]),
        }
    return rows
