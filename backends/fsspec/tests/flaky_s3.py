"""A minimal S3 endpoint that answers chosen requests with HTTP 500, for the retry tests.

moto answers 500 only by accident (two requests on one key at once), so the tests that need a
server error on demand use this: path-style ``GET``/``HEAD``/``PUT`` of objects kept in memory,
``404 NoSuchKey`` for a missing one, and ``500 InternalError`` for the first ``fail_first``
requests of every (method, object), or for all of them with ``fail_first=None``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FlakyS3", "flaky_s3"]

_ERROR = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message></Error>'


class FlakyS3(ThreadingHTTPServer):
    """The server; ``requests`` counts what it received per (method, path)."""

    daemon_threads = True

    def __init__(self, fail_first: int | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fail_first = fail_first
        self.objects: dict[str, bytes] = {}
        self.requests: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def storage_options(self) -> dict[str, object]:
        """s3fs ``storage_options`` for this server."""
        return {
            "endpoint_url": self.endpoint,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "us-east-1"},
        }

    def count(self, method: str) -> int:
        """Requests received with ``method``."""
        with self.lock:
            return sum(n for (m, _path), n in self.requests.items() if m == method)


class _Handler(BaseHTTPRequestHandler):
    server: FlakyS3
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _fails(self) -> bool:
        server = self.server
        with server.lock:
            server.requests[(self.command, self.path)] += 1
            seen = server.requests[(self.command, self.path)]
        return server.fail_first is None or seen <= server.fail_first

    def _answer(self, status: int, body: bytes = b"", *, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.send_header("ETag", '"0"')
        if status >= 400:
            self.send_header("Content-Type", "application/xml")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str) -> None:
        body = _ERROR.format(code=code, message="answered by the test server").encode()
        self._answer(status, b"" if self.command == "HEAD" else body)

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self._fails():
            self._error(500, "InternalError")
            return
        with self.server.lock:
            self.server.objects[self.path] = data
        self._answer(200)

    def do_GET(self) -> None:
        self._read()

    def do_HEAD(self) -> None:
        self._read()

    def _read(self) -> None:
        if self._fails():
            self._error(500, "InternalError")
            return
        with self.server.lock:
            data = self.server.objects.get(self.path)
        if data is None:
            self._error(404, "NoSuchKey")
        else:
            self._answer(200, data, length=len(data))


@contextmanager
def flaky_s3(fail_first: int | None = 1) -> Iterator[FlakyS3]:
    """A running :class:`FlakyS3`, shut down on exit."""
    server = FlakyS3(fail_first)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
