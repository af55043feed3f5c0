"""Makes SGLang's storage modules importable for the ``sglang`` tests when sglang is installed.

``scripts/sglang-test.sh`` installs the released ``sglang`` package without its dependencies (the
full server needs CUDA, transformers, ...). SGLang's top-level ``sglang/__init__.py`` imports the
whole server, but the modules under test (``sglang.srt.mem_cache.hicache_storage``, the storage
backend factory, ``HiCacheFile``) need only torch and a few small packages. When the normal import
fails, the real package directory is registered without running that top-level ``__init__``; every
module under test is still SGLang's own code.

This runs when the conftest is imported, before the test modules, so
``hicache_storage.integrations.sglang`` sees SGLang's ``HiCacheStorage`` as its base class.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest

STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
sys.path.insert(0, str(Path(__file__).resolve().parent))  # engine_configs, sglang_controllers


def _forget_sglang() -> None:
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]


def _load_sglang_storage() -> str | None:
    """Import SGLang's storage modules; ``None`` on success, else why the sglang tests skip."""
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


SGLANG_SKIP_REASON = _load_sglang_storage()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark a test class's ``known_deviations`` (test name → (reason, strict)) as expected failures."""
    for item in items:
        known = getattr(getattr(item, "cls", None), "known_deviations", None)
        if not known:
            continue
        entry = known.get(item.name) or known.get(getattr(item, "originalname", ""))
        if entry:
            reason, strict = entry
            item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))
