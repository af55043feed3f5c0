"""``hicache-storage keyspace``: the key-space prefix a deployment's KV pages are stored under.

Two deployments share pages exactly when their prefixes (and, for rank-local pages, their rank
suffixes) are equal: with ``--tp-lcm-size`` the prefix names the head-shard geometry instead of the
tp rank and size, so TP2 and TP4 deployments of one model print the same prefix. Nothing is opened
or written; the host pool is described by its geometry (global ``--kv-heads``; a rank holds
``kv_heads / tp_size``).
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from rich.console import Console

from ..config import make_config
from ..host_pool import LAYOUTS, HostKVPool
from ..keys import pool_keyspace
from ..pools.host import pool_facts
from ..pools.shard_plan import shard_space
from ..settings import StorageSettings
from .arguments import positive_int

__all__ = ["add_keyspace_command", "describe_keyspace"]


def describe_keyspace(args: argparse.Namespace) -> dict[str, Any]:
    """Prefix, record naming and an example storage key of the deployment ``args`` describe."""
    if args.kv_heads % args.tp_size and not args.mla:
        raise ValueError(f"--kv-heads {args.kv_heads} does not divide by --tp-size {args.tp_size}")
    extra: dict[str, Any] = {"namespace": args.namespace, "model_revision": args.model_revision}
    if args.tp_lcm_size is not None:
        extra["tp_lcm_size"] = args.tp_lcm_size
    config = make_config(
        args.model, tp_rank=args.tp_rank, tp_size=args.tp_size, is_mla_model=args.mla, extra_config=extra
    )
    settings = StorageSettings.from_config(config)
    pool = HostKVPool(
        num_pages=1,
        page_size=args.page_size,
        layer_num=args.layers,
        dtype=args.dtype,
        layout=args.layout,
        is_mla=args.mla,
        head_num=max(1, args.kv_heads // args.tp_size),
        head_dim=args.head_dim,
        kv_cache_dim=args.head_dim,
        pin_memory=False,
    )
    facts = pool_facts(pool)
    space = pool_keyspace(config, facts, namespace=settings.namespace, model_revision=settings.model_revision)
    space, shards = shard_space("kv", config, settings, facts, space)
    example = "0" * 64
    if shards is not None:
        records = f"head shards {shards.first}..{shards.first + shards.split - 1} of {shards.lcm}"
        key = shards.storage_keys(space, [example])[0]
    else:
        records = f"whole pages, rank-local ({space.rank_suffix})"
        key = space.storage_key(example)
    return {"prefix": space.prefix, "records": records, "record_bytes": space.page_bytes, "example_key": key}


def _run(args: argparse.Namespace, console: Console) -> int:
    logging.getLogger("hicache_storage.pools.shard_plan").addHandler(logging.StreamHandler())
    row = describe_keyspace(args)
    if args.json:
        print(json.dumps(row))
        return 0
    for name, value in row.items():
        console.print(f"{name:13} {value}", highlight=False, soft_wrap=True)
    return 0


def add_keyspace_command(sub: Any) -> None:
    """Add ``keyspace`` to the ``hicache-storage`` sub-commands."""
    parser = sub.add_parser("keyspace", help="print the key-space prefix a deployment's KV pages are stored under")
    parser.add_argument("--model", required=True, help="model name as the engine passes it")
    parser.add_argument("--tp-size", type=positive_int, default=1)
    parser.add_argument("--tp-rank", type=int, default=0)
    parser.add_argument("--tp-lcm-size", type=positive_int, help="head shards per page (shares across TP sizes)")
    parser.add_argument("--kv-heads", type=positive_int, default=8, help="the model's global KV head count")
    parser.add_argument("--head-dim", type=positive_int, default=128)
    parser.add_argument("--layers", type=positive_int, default=32)
    parser.add_argument("--page-size", type=positive_int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--layout", default="page_first", choices=LAYOUTS)
    parser.add_argument("--mla", action="store_true", help="an MLA model (KV replicated on every rank)")
    parser.add_argument("--namespace", default="")
    parser.add_argument("--model-revision", default="")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_run)
