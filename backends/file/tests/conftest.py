"""Makes the test helpers importable; prints the figures the fault tests measured."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)
