"""``hicache-storage purge``: remove whole key spaces chosen by model, revision, namespace or prefix,
or pages older than an age; never a record of another key space.

Every filter value must be non-empty (an unset shell variable gives ``""``, which would otherwise
select the default namespace of every model). A key space is matched by model or namespace only
through a manifest stored in it that names it (see :mod:`.operate`). When nothing matches, the
command says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ..listing import StoredPage
from .operate import KeySpaceUsage, named_cells, usage_of
from .store_access import backend_arguments, open_store

__all__ = ["PURGE_NEEDS", "Chosen", "add_purge_command", "parse_age", "select"]

#: Capabilities ``purge`` needs.
PURGE_NEEDS = ("supports_list", "supports_delete")

_AGE = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>[smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PREFIX = re.compile(r"hc[0-9]+-[0-9a-f]{20}\.")
_FILTERS = ("model", "revision", "namespace", "older_than", "prefix")


def parse_age(text: str) -> float:
    """Seconds in an age such as ``90s``, ``30m``, ``12h``, ``1d``, ``2w``; raises :class:`ConfigError`."""
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise ConfigError("--older-than", f"expected a number and a unit (s, m, h, d, w), e.g. 1d or 12h; got {text!r}")
    return float(match["n"]) * _UNITS[match["unit"]]


@dataclass
class Chosen:
    """One key space a purge touches: the storage keys it removes, and whether that is all of it."""

    space: KeySpaceUsage
    keys: list[str]
    whole: bool

    def row(self) -> dict[str, Any]:
        named = {k: v for k, v in self.space.row().items() if k in ("prefix", "model", "revision", "namespace", "pool")}
        return {**named, "records": len(self.keys), "whole_key_space": self.whole}


def _check_filters(args: argparse.Namespace) -> None:
    for name in _FILTERS:
        value = getattr(args, name)
        if value is not None and not value.strip():
            option = "--" + name.replace("_", "-")
            raise ConfigError(
                option,
                "empty value (an unset shell variable?): name what to remove; "
                "key spaces of the default namespace are removed by --model or --prefix",
            )
    chosen = [args.model, args.namespace, args.older_than, args.prefix]
    if sum(value is not None for value in chosen) != 1:
        raise ConfigError(
            "purge", "choose exactly one of --model (with optional --revision), --namespace, --older-than, --prefix"
        )
    if args.revision is not None and args.model is None:
        raise ConfigError("--revision", "goes with --model")
    if args.prefix is not None and _PREFIX.fullmatch(args.prefix) is None:
        raise ConfigError(
            "--prefix", f"expected a key-space prefix as usage lists it (hc1-<20 hex digits>.), got {args.prefix!r}"
        )
    if args.older_than is not None:
        parse_age(args.older_than)
    if args.json and not (args.yes or args.dry_run):
        raise ConfigError("--json", "goes with --dry-run or --yes (a question would mix with the JSON)")


def _pages_older(space: KeySpaceUsage, cutoff: float) -> list[StoredPage]:
    return [page for page in space.records if page.modified is not None and page.modified < cutoff]


def select(args: argparse.Namespace, spaces: list[KeySpaceUsage]) -> list[Chosen]:
    """The key spaces (and records) the purge filters of ``args`` choose."""
    chosen: list[Chosen] = []
    cutoff = time.time() - parse_age(args.older_than) if args.older_than is not None else 0.0
    for space in spaces:
        m = space.manifest
        whole = space.keys + space.manifest_keys
        if args.prefix is not None:
            if space.prefix == args.prefix:
                chosen.append(Chosen(space, whole, True))
            continue
        if args.model is not None or args.namespace is not None:
            if m is None:
                continue  # a key space without a manifest of its own is never matched by model or namespace
            if args.model is not None and (
                m.model_name != args.model or (args.revision is not None and m.model_revision != args.revision)
            ):
                continue
            if args.namespace is not None and m.namespace != args.namespace:
                continue
            chosen.append(Chosen(space, whole, True))
            continue
        if m is not None and m.pinned:
            continue  # age-based purges never remove a pinned key space
        if space.oldest is not None:  # the backend knows each page's write time
            old = [p.key for p in _pages_older(space, cutoff)]
            if old:
                chosen.append(Chosen(space, old, len(old) == space.pages))
        elif m is not None and m.last_write < cutoff:
            chosen.append(Chosen(space, whole, True))
    return chosen


def _what(args: argparse.Namespace) -> str:
    if args.model is not None:
        return f"model {args.model!r}" + (f" revision {args.revision!r}" if args.revision is not None else "")
    if args.namespace is not None:
        return f"namespace {args.namespace!r}"
    if args.prefix is not None:
        return f"prefix {args.prefix}"
    return f"pages older than {args.older_than} outside pinned key spaces"


def _table(args: argparse.Namespace, chosen: list[Chosen]) -> Table:
    table = Table(title=("would remove" if args.dry_run else "to remove") + f" from {args.backend}")
    for column in ("key space", "model", "revision", "namespace", "pool", "records", "whole key space"):
        table.add_column(column)
    for item in chosen:
        row = item.row()
        table.add_row(*named_cells(row), str(row["records"]), "yes" if item.whole else "no")
    return table


def _cmd_purge(args: argparse.Namespace, console: Console) -> int:
    _check_filters(args)
    with open_store(args, "purge", PURGE_NEEDS) as storage:
        chosen = select(args, usage_of(storage))
        total = sum(len(item.keys) for item in chosen)
        report: dict[str, Any] = {
            "backend": args.backend,
            "filter": {name: getattr(args, name) for name in _FILTERS if getattr(args, name) is not None},
            "dry_run": args.dry_run,
            "matched": [item.row() for item in chosen],
            "records": total,
            "removed": 0,
        }
        if not chosen:
            message = f"nothing matched: no key space of {args.backend} holds {_what(args)} (usage lists what it holds)"
            if args.json:
                print(json.dumps({**report, "nothing_matched": True}, indent=2))
            Console(stderr=True).print(message, highlight=False, markup=False)
            return 1
        if not args.json:
            console.print(_table(args, chosen))
        if args.dry_run:
            if args.json:
                print(json.dumps(report, indent=2))
            else:
                console.print(f"{total} records would be removed; nothing was removed", highlight=False)
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                raise ConfigError("--yes", "purge asks before deleting; pass --yes to delete without asking")
            answer = input(f"remove {total} records from {len(chosen)} key spaces? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                console.print("nothing removed")
                return 1
        removed = sum(sum(storage.delete_stored(item.keys)) for item in chosen)
        report["removed"] = removed
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            console.print(f"removed {removed} of {total} records from {len(chosen)} key spaces", highlight=False)
        return 0 if removed == total else 1


def add_purge_command(sub: Any) -> None:
    """Register ``purge``."""
    purge = sub.add_parser("purge", help="remove the pages of chosen key spaces, or pages older than an age")
    backend_arguments(purge)
    purge.add_argument("--model", help="remove every key space of this model")
    purge.add_argument("--revision", help="with --model: only this revision")
    purge.add_argument("--namespace", help="remove every key space of this namespace (not empty)")
    purge.add_argument(
        "--older-than", help="remove pages written longer ago than this (e.g. 1d, 12h); pinned key spaces stay"
    )
    purge.add_argument("--prefix", help="remove one key space by its prefix (as usage lists it)")
    purge.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    purge.add_argument("--yes", action="store_true", help="do not ask before deleting")
    purge.add_argument("--json", action="store_true", help="print what matched and was removed as JSON")
    purge.set_defaults(handler=_cmd_purge)
