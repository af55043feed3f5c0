"""Helpers of the redis backend tests: the test servers of this checkout (scripts/services)."""

from __future__ import annotations

from pathlib import Path

from hicache_storage.testing import TestServices

SERVICES = TestServices(Path(__file__).resolve().parents[3])
settings = SERVICES.settings
control = SERVICES.control
