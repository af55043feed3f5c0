"""The benchmark smoke tests: every script under ``benchmarks/`` runs end to end on a few pages."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_support
