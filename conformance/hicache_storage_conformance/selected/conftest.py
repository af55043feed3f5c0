"""Deselects categories not asked for, and turns a backend that cannot be built into one failure.

Used when the suite runs on a selected backend (``HICACHE_CONFORMANCE_BACKEND`` or the pytest
plugin's ``--hicache-backend``): if the selection is invalid, or the backend cannot be loaded or
built from its config (a missing required option, say), the run reports one failing test that
says so instead of the same error in every test.
"""

from __future__ import annotations

import pytest

from hicache_storage_conformance.gate import gate_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gate_items(config, items)
