"""The ``example`` backend for hicache-storage: pages kept in process memory."""

from .backend import ExampleBackend, ExampleOptions, ExampleRawClient

__all__ = ["ExampleBackend", "ExampleOptions", "ExampleRawClient"]
