"""What a benchmark's results JSON records about the run: versions, CPUs and load."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

#: Distributions whose versions a results file records (those installed).
DISTRIBUTIONS = (
    "hicache-storage",
    "hicache-storage-file",
    "hicache-storage-slab",
    "hicache-storage-mooncake",
    "hicache-storage-sim",
    "sglang",
    "mooncake-transfer-engine",
    "mooncake-transfer-engine-non-cuda",
    "torch",
    "numpy",
    "xxhash",
)


def versions() -> dict[str, str]:
    """Version of each installed distribution of :data:`DISTRIBUTIONS`, and of Python."""
    found = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (empty where the system has none)."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def describe() -> dict[str, Any]:
    """Versions, platform, CPU model and count, usable CPUs and the load average, now."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "versions": versions(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "usable_cpus": usable,
        "load_average": load_average(),
    }
