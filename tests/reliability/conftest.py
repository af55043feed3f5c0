"""Fixtures of the reliability tests: private servers on 127.0.0.1 that the tests may kill.

What they measure is printed at the end of the run by the checkout's root ``conftest.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from hicache_storage.testing.pytest_fixtures import services  # noqa: F401 (a fixture)
