"""Exception types of the SDK.

Invalid requests raise subclasses of :class:`ValueError` before anything is written.
Backend faults never escape a batch call; they are counted in ``get_stats()`` instead.
"""

from __future__ import annotations

__all__ = [
    "ApiVersionError",
    "BackendFault",
    "BackendLoadError",
    "ConfigError",
    "HostPoolError",
    "InvalidKeyError",
    "InvalidRequestError",
    "UnsupportedOperation",
]


class ConfigError(ValueError):
    """A configuration option is missing, unknown or invalid.

    ``option`` names the offending option (for example ``"extra_config.path"``).
    """

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"{option}: {message}")


class InvalidRequestError(ValueError):
    """A storage call was malformed (wrong ``host_indices`` length, wrong page size, ...)."""


class InvalidKeyError(InvalidRequestError):
    """A key is empty, not a string, too long, or contains characters outside the safe set."""


class HostPoolError(ValueError):
    """Misuse of the host pool allocator (double allocation, double free, bad index)."""


class BackendLoadError(ImportError):
    """A backend could not be found, imported or accepted by the registry."""


class ApiVersionError(BackendLoadError):
    """A plugin targets an API version this SDK cannot host."""


class BackendFault(Exception):
    """Raised by backend primitives for an operational fault (connection lost, timeout, ...).

    Batch calls turn it, like any other exception from a primitive, into misses or ``False``.
    """


class UnsupportedOperation(NotImplementedError):
    """The backend does not declare the capability this call needs (``delete``, ``clear``, ``list``)."""
