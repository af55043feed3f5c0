"""A TCP proxy between a client and a server that misbehaves on command (drops, stalls, resets, slows)."""

from __future__ import annotations

import contextlib
import multiprocessing
import socket
import threading
import time
from typing import Any

from rel_support import HOST, free_ports


class FaultProxy:
    """A loopback TCP proxy in front of one server that can turn slow, hang, reset or refuse.

    It runs in a process of its own, so it keeps forwarding while a client holds the GIL (some
    native clients block in calls that never release it). Modes (:meth:`set`): ``pass``,
    ``delay`` (every chunk held ``delay_s`` both ways), ``stall`` (forward nothing: a hung server),
    ``reset`` (reset every connection, new ones at once), ``down`` (connection refused).
    """

    def __init__(self, target_port: int, target_host: str = HOST) -> None:
        self.port = free_ports(1)[0]
        context = multiprocessing.get_context("spawn")
        self._control, child = context.Pipe()
        self._process = context.Process(
            target=_serve_proxy, args=(target_port, self.port, target_host, child), name="fault-proxy", daemon=True
        )
        self._process.start()
        if not self._control.poll(30) or self._control.recv() != "ready":
            self._process.kill()
            raise RuntimeError("the fault proxy did not start")

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def set(self, mode: str, delay_s: float = 0.0) -> None:
        """Switch to ``mode``; returns once the proxy has switched."""
        self._control.send((mode, delay_s))
        if not self._control.poll(10) or self._control.recv() != "ok":
            raise RuntimeError(f"the fault proxy did not switch to {mode}")

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, BrokenPipeError):
            self._control.send(("close", 0.0))
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()


def _serve_proxy(target_port: int, port: int, target_host: str, control: Any) -> None:
    """Body of the proxy process: serve until told to close (or the parent goes away)."""
    server = _ProxyServer(target_port, port, target_host)
    control.send("ready")
    while True:
        try:
            mode, delay_s = control.recv()
        except (EOFError, OSError):
            break
        if mode == "close":
            break
        server.set(mode, delay_s)
        control.send("ok")
    server.close()


class _ProxyServer:
    """A loopback TCP proxy in front of one server that can turn slow, hang, reset or refuse.

    Modes: ``pass`` (forward at once), ``delay`` (hold every chunk ``delay_s`` before forwarding it,
    both ways), ``stall`` (accept, then forward nothing: a hung server), ``reset`` (close every
    connection, new ones at once), ``down`` (not listening: connection refused). Switching back to
    ``pass`` resumes stalled connections, as ``SIGCONT`` resumes a stopped server.
    """

    def __init__(self, target_port: int, port: int, target_host: str = HOST) -> None:
        self.target = (target_host, target_port)
        self.port = port
        self.mode = "pass"
        self.delay_s = 0.0
        self._lock = threading.Lock()
        self._connections: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self._closed = False
        self._listen()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="fault-proxy-accept", daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.mode == "reset":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), name="fault-proxy-pump", daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                while self.mode == "stall" and not self._closed:
                    time.sleep(0.01)
                if self.mode == "delay":
                    time.sleep(self.delay_s)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def _drop_connections(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            _reset(connection)

    def set(self, mode: str, delay_s: float = 0.0) -> None:
        """Switch to ``mode`` (see the class docstring)."""
        assert mode in ("pass", "delay", "stall", "reset", "down"), mode
        if mode == "down" and self._listener is not None:
            self._listener.close()
            self._listener = None
        if mode in ("reset", "down"):
            self._drop_connections()
        self.delay_s = delay_s
        self.mode = mode
        if mode != "down" and self._listener is None:
            self._listen()

    def close(self) -> None:
        self._closed = True
        if self._listener is not None:
            self._listener.close()
        self._drop_connections()


def _reset(connection: socket.socket) -> None:
    """Close with an RST (``SO_LINGER`` 0), as a server refusing a connection it accepted does."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        connection.close()
