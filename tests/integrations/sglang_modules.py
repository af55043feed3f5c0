"""SGLang's storage modules, imported on a machine without SGLang's server dependencies.

``scripts/sglang-test.sh`` installs the released ``sglang`` package without its dependencies (the
full server needs CUDA, transformers, ...). SGLang's top-level ``sglang/__init__.py`` imports the
whole server, but its storage modules (``sglang.srt.mem_cache.hicache_storage``, the storage
backend factory, ``HiCacheFile``) need only torch and a few small packages. When the normal import
fails, the real package directory is registered without running that top-level ``__init__``; every
module imported afterwards is still SGLang's own code.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__all__ = ["STORAGE_MODULE", "load_sglang_storage"]

STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"


def _forget_sglang() -> None:
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]


def load_sglang_storage() -> str | None:
    """Import SGLang's storage modules; ``None`` on success, else why they cannot be imported."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "sglang is not installed; run scripts/sglang-test.sh (installs sglang==0.5.23 without its dependencies)"
    try:
        importlib.import_module(STORAGE_MODULE)
        importlib.import_module("sglang.srt.mem_cache.storage")
        return None
    except Exception:
        _forget_sglang()
    package = types.ModuleType("sglang")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    sys.modules["sglang"] = package
    try:
        importlib.import_module(STORAGE_MODULE)
        importlib.import_module("sglang.srt.mem_cache.storage")
    except Exception as exc:
        _forget_sglang()
        return f"sglang's storage modules do not import here: {type(exc).__name__}: {exc}"
    return None
