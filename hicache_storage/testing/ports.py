"""Loopback ports for private test servers: free now, and below the kernel's ephemeral range."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["HOST", "free_ports", "port_free"]

HOST = "127.0.0.1"


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to client sockets (a server port above it may be taken any time)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, *, bus_offset: int | None = None) -> list[int]:
    """``count`` consecutive free ports from 20000 up (and ``port + bus_offset`` free as well), all below the
    kernel's ephemeral range, so no client socket of a busy run takes one between this check and the start."""
    top = min(29990, _ephemeral_low() - (bus_offset or 0)) - count
    for _ in range(200):
        base = random.randrange(20000, max(top, 20001))
        ports = list(range(base, base + count))
        wanted = ports + ([p + bus_offset for p in ports] if bus_offset else [])
        if all(port_free(p) for p in wanted):
            return ports
    raise RuntimeError("no free loopback ports found")
