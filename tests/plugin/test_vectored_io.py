"""Tests of the vectored I/O helpers, including the paths for more than IOV_MAX buffers."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_storage.plugin.vectored_io import (
    IOV_MAX,
    LeftoverTemps,
    preadv_all,
    publish_file,
    pwritev_all,
    sendmsg_all,
    writev_all,
)


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


def _send_through_small_buffer(
    buffers: list[memoryview], while_blocked: Callable[[], bool] | None = None, *, reader_delay_s: float = 0.0
) -> tuple[bytes, float | None]:
    """Send ``buffers`` over a socketpair with a 64 KiB send buffer (partial sends) and a timeout of
    7 s; (bytes the peer received, the sender's timeout afterwards)."""
    expected = sum(buffer.nbytes for buffer in buffers)
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    left.settimeout(7.0)
    received = bytearray()

    def drain() -> None:
        time.sleep(reader_delay_s)
        while len(received) < expected:
            chunk = right.recv(1 << 16)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        sendmsg_all(left, buffers, while_blocked)
        reader.join(timeout=30)
        return bytes(received), left.gettimeout()
    finally:
        left.close()
        right.close()


def test_sendmsg_all_sends_every_byte_across_partial_sends() -> None:
    """More buffers than IOV_MAX and more bytes than the socket buffer: every byte arrives, in order."""
    segments = [*_segments(IOV_MAX + 5, 7), memoryview(os.urandom(3 << 20)), memoryview(b"")]
    received, _timeout = _send_through_small_buffer(segments)
    assert received == b"".join(segments)


def test_sendmsg_all_works_while_the_socket_is_full_then_waits() -> None:
    """``while_blocked`` runs only when the socket cannot take more; once it has nothing left to do,
    the send waits for the reader; every byte arrives and the socket's timeout is restored."""
    payload = memoryview(os.urandom(4 << 20))
    jobs = list(range(5))
    done: list[int] = []

    def work() -> bool:
        if not jobs:
            return False
        done.append(jobs.pop(0))
        return True

    # the reader starts late, so the sender finds the socket full first
    received, timeout = _send_through_small_buffer([payload[:100], payload[100:]], work, reader_delay_s=0.05)
    assert received == payload
    assert timeout == 7.0
    assert done == [0, 1, 2, 3, 4]  # all the work was done while waiting, each job once


def test_sendmsg_all_with_work_times_out_like_a_blocking_send() -> None:
    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
    left.settimeout(0.2)
    try:
        begin = time.monotonic()
        with pytest.raises(TimeoutError):
            sendmsg_all(left, [os.urandom(8 << 20)], lambda: False)  # nobody reads
        assert time.monotonic() - begin < 5
        assert left.gettimeout() == 0.2
    finally:
        left.close()
        right.close()


def test_pwritev_all_writes_at_the_offset_and_leaves_the_file_offset(tmp_path: Path) -> None:
    segments = _segments(IOV_MAX + 5, 3)
    total = sum(s.nbytes for s in segments)
    path = tmp_path / "f"
    path.write_bytes(b"-" * 10)
    fd = os.open(path, os.O_RDWR)
    try:
        pwritev_all(fd, segments, 7, total)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)
    assert path.read_bytes() == b"-" * 7 + b"".join(segments)


def test_publish_file_replaces_the_final_file_whole(tmp_path: Path) -> None:
    final = tmp_path / "page"
    final.write_bytes(b"old")
    publish_file(str(tmp_path / ".page.1.tmp"), str(final), _segments(3, 4), 12)
    assert final.read_bytes() == b"".join(_segments(3, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page"]


def test_a_temp_file_a_failed_publish_cannot_remove_is_swept_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system turns read-only between the write and the rename: neither the rename nor the
    removal of the temp file works; once it is writable again, a sweep removes the temp file."""
    final, temp = tmp_path / "page", tmp_path / ".page.1.tmp"
    real_unlink, real_replace = os.unlink, os.replace

    def read_only(*_args: object, **_kwargs: object) -> None:
        raise OSError(30, "Read-only file system")

    leftovers = LeftoverTemps()
    monkeypatch.setattr(os, "replace", read_only)
    monkeypatch.setattr(os, "unlink", read_only)
    with pytest.raises(OSError, match="Read-only"):
        publish_file(str(temp), str(final), _segments(2, 8), 16, leftovers=leftovers)
    assert temp.exists() and not final.exists() and len(leftovers) == 1
    assert leftovers.sweep() == 1  # still read-only: kept for the next sweep
    monkeypatch.setattr(os, "unlink", real_unlink)
    monkeypatch.setattr(os, "replace", real_replace)
    publish_file(str(tmp_path / ".page.2.tmp"), str(final), _segments(2, 8), 16, leftovers=leftovers)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page"]  # the next publish swept the temp file
    assert len(leftovers) == 0 and leftovers.sweep() == 0


def test_a_failed_publish_removes_its_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    leftovers = LeftoverTemps()
    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError, match="No space"):
        publish_file(str(tmp_path / ".page.1.tmp"), str(tmp_path / "page"), _segments(2, 8), 16, leftovers=leftovers)
    assert list(tmp_path.iterdir()) == [] and len(leftovers) == 0
