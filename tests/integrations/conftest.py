"""Makes SGLang's storage modules importable for the ``sglang`` tests when sglang is installed.

This runs when the conftest is imported, before the test modules, so
``hicache_storage.integrations.sglang`` sees SGLang's ``HiCacheStorage`` as its base class (how
the modules are imported without SGLang's server dependencies: :mod:`sglang_modules`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engine_configs, sglang_controllers, sglang_modules

from sglang_modules import load_sglang_storage

SGLANG_SKIP_REASON = load_sglang_storage()


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
