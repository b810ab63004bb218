"""The local test server loop: it answers requests while the block runs and is gone when it ends."""

from __future__ import annotations

import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.local_http import serving


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *_: object) -> None:
        pass


def _get(port: int) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_server_answers_every_request_in_the_block_and_refuses_connections_after_it():
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), _Hello)) as httpd:
        port = httpd.server_address[1]
        assert [_get(port) for _ in range(3)] == [(200, b"hello")] * 3
    assert httpd.socket.fileno() == -1  # closed, not only stopped
    with pytest.raises(ConnectionRefusedError):
        _get(port)
