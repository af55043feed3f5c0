"""Tests of the vectored I/O helpers, including the paths for more than IOV_MAX buffers."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from hicache_storage.vectored_io import IOV_MAX, preadv_all, sendmsg_all, writev_all


def _segments(count: int, size: int) -> list[memoryview]:
    return [memoryview(bytes([index % 251]) * size) for index in range(count)]


def test_many_buffers_round_trip(tmp_path: Path) -> None:
    segments = _segments(IOV_MAX + 37, 3)
    total = sum(s.nbytes for s in segments)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        writev_all(fd, segments, total)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(segments)
    targets = [memoryview(bytearray(3)) for _ in segments]
    probe = bytearray(1)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert preadv_all(fd, [*targets, probe]) == total
    finally:
        os.close(fd)
    assert b"".join(targets) == b"".join(segments)


def test_short_file_reports_bytes_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    fd = os.open(path, os.O_RDONLY)
    try:
        first, second = bytearray(4), bytearray(4)
        assert preadv_all(fd, [first, second]) == 6
        many = [bytearray(1) for _ in range(IOV_MAX + 5)]
        assert preadv_all(fd, many, offset=2) == 4
    finally:
        os.close(fd)
    assert bytes(first) == b"abcd" and bytes(second[:2]) == b"ef"
    assert b"".join(many[:4]) == b"cdef"


def test_non_byte_views_are_written_as_bytes(tmp_path: Path) -> None:
    words = memoryview(bytearray(range(16))).cast("I")
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        writev_all(fd, [b"x"] * (IOV_MAX + 1) + [words], IOV_MAX + 1 + 16)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"x" * (IOV_MAX + 1) + bytes(range(16))


def test_sendmsg_all_sends_every_byte_across_partial_sends() -> None:
    """More buffers than IOV_MAX and more bytes than the socket buffer: every byte arrives, in order."""
    segments = [*_segments(IOV_MAX + 5, 7), memoryview(os.urandom(3 << 20)), memoryview(b"")]
    expected = b"".join(segments)
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)  # forces partial sends
    received = bytearray()

    def drain() -> None:
        while len(received) < len(expected):
            chunk = right.recv(1 << 16)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        sendmsg_all(left, segments)
        reader.join(timeout=30)
    finally:
        left.close()
        right.close()
    assert bytes(received) == expected
