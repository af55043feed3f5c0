"""The SDK's layers: backends that wrap a backend (chunking, resilience guard, result checks, timing)."""

from __future__ import annotations

from .base import BATCH_PRIMITIVES, Layer, operation_of
from .batch_layer import BatchCall, BatchLayer
from .chunking import Chunking
from .guard import Guard
from .result_check import ResultCheck
from .stack import LayerFactory, Stack, build_stack
from .timing import Timing

__all__ = [
    "BATCH_PRIMITIVES",
    "BatchCall",
    "BatchLayer",
    "Chunking",
    "Guard",
    "Layer",
    "LayerFactory",
    "ResultCheck",
    "Stack",
    "Timing",
    "build_stack",
    "operation_of",
]
