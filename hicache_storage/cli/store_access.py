"""How an operator command reaches a store: the configuration checked first, nothing created.

Before a command opens a backend it checks the ``--config`` without opening anything
(:func:`hicache_storage.preflight.check_config`), refuses in one line a command the backend cannot
serve (a listing on a backend that does not list) and a store directory that does not exist (an
operator command never creates a store), and only then builds the instance.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ..config import make_config
from ..contract import HiCacheStorage
from ..errors import ConfigError, UnsupportedOperation
from ..preflight import CheckedConfig, check_config
from ..registry import load_backend
from .arguments import parse_json_option

__all__ = ["CANNOT", "backend_arguments", "check_store", "open_store"]

#: What a backend without each capability cannot do, as a command's refusal says it.
CANNOT = {
    "supports_list": "list what it stores",
    "supports_delete": "delete stored records",
    "supports_clear": "remove the pages it was given (clear)",
}


def check_store(
    command: str, backend: str, extra: dict[str, Any] | None, needs: Sequence[str] = (), *, must_exist: bool = True
) -> CheckedConfig:
    """``extra`` checked for ``backend``; raises in one line what makes ``command`` impossible.

    :class:`UnsupportedOperation` when a capability in ``needs`` is not declared,
    :class:`ConfigError` for a bad option or (with ``must_exist``) a store directory that does not exist.
    """
    checked = check_config(backend, extra)
    for capability in needs:
        if not getattr(checked.capabilities, capability):
            raise UnsupportedOperation(
                f"{command} {backend}: the {backend} backend cannot {CANNOT.get(capability, capability)} "
                f"(its capabilities do not include {capability}, see hicache-storage backends), "
                f"so {command} cannot run on it"
            )
    directory = checked.store_directory()
    if must_exist and directory is not None and not directory.is_dir():
        raise ConfigError(
            "--config",
            f"no store at {str(directory)!r}: the directory does not exist (is the path right?); "
            f"{command} never creates a store",
        )
    return checked


def open_store(args: argparse.Namespace, command: str, needs: Sequence[str] = (), **sdk: Any) -> HiCacheStorage:
    """The backend of ``args.backend``/``args.config`` after :func:`check_store`; ``sdk`` sets SDK options
    (over the config's)."""
    extra = {**parse_json_option(args.config), **sdk}
    check_store(command, args.backend, extra, needs)
    model = getattr(args, "model_name", None) or f"hicache-storage-{command}"
    return load_backend(args.backend, make_config(model, extra_config=extra))


def backend_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every operator command takes: the backend, its ``--config`` and ``--model-name``."""
    parser.add_argument("backend", help="backend name (entry point) or module:Class")
    parser.add_argument("--config", help="backend options as JSON or @file (the same extra_config the engine uses)")
    parser.add_argument("--model-name", help="model name of the config (the key spaces of every model are seen anyway)")
