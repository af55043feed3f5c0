"""What a backend's conformance hooks raise when they cannot work here (the suite then skips the test)."""

from __future__ import annotations

__all__ = ["SideChannelUnavailable"]


class SideChannelUnavailable(Exception):
    """The hook cannot reach the stored pages (or the server) behind the backend's back in this setting:
    no such hook, a server this test run does not own, no source checkout to start one from."""
