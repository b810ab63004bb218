"""Serve a local test server (http.server, socketserver) on a thread, and stop it without waiting.

`BaseServer.serve_forever()` looks for a shutdown request only between polls, every `poll_interval`
(0.5 s by default), so `shutdown()` waits up to half a second: on the probe's and preflight's tests,
which start a server per test, that was most of their time. Here the loop waits on the listening
socket and on a wake-up socket together, so the end of the block stops it at once.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import socketserver
import threading
from collections.abc import Iterator


def _serve(server: socketserver.BaseServer, wake: socket.socket) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(server, selectors.EVENT_READ)  # type: ignore[arg-type] - it has fileno()
        selector.register(wake, selectors.EVENT_READ)
        while True:
            ready = {key.fileobj for key, _ in selector.select()}
            if wake in ready:
                return
            server.handle_request()  # a connection is waiting: accepts it without blocking


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[socketserver.BaseServer]:
    """`with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as httpd:` answers requests until
    the block ends, then stops the loop and closes the socket."""
    wake, waker = socket.socketpair()
    thread = threading.Thread(target=_serve, args=(server, wake), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        waker.send(b"\0")
        thread.join()
        server.server_close()
        wake.close()
        waker.close()
