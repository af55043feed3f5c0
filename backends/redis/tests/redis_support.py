"""Helpers of the redis backend tests: the test servers of this checkout (scripts/services)."""

from __future__ import annotations

from hicache_storage.testing.fixtures import checkout_services

__all__ = ["SERVICES", "control", "settings"]

SERVICES = checkout_services(__file__)
settings = SERVICES.settings
control = SERVICES.control
