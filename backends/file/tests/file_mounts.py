"""Mount helpers for the file backend's fault tests (tmpfs, read-only remounts), where the machine allows them."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path


def mount(*args: str) -> None:
    """Run ``mount ARGS`` (raises when it fails)."""
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=20)


def umount(target: Path) -> None:
    """Unmount ``target`` until it is no longer a mount point (a bind mount may be stacked)."""
    for _ in range(5):
        subprocess.run(["umount", str(target)], check=False, capture_output=True, timeout=20)
        if not mounted(target):
            return


def mounted(target: Path) -> bool:
    """Whether ``target`` is a mount point."""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == str(target) for line in mounts)


def can_mount() -> bool:
    """Whether this process may mount file systems (root, and mount present and working)."""
    if os.geteuid() != 0:
        return False
    probe = Path(tempfile.mkdtemp(prefix="hc-rel-mount-probe-"))
    try:
        mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe))
    except (subprocess.CalledProcessError, FileNotFoundError, subprocess.TimeoutExpired):
        return False
    finally:
        umount(probe)
        probe.rmdir()
    return True
