"""A small OpenAI-compatible HTTP server on 127.0.0.1 for the verification tests, with the faults a
deploy can have: a proxy that buffers the stream, no key check, malformed events, a slow engine.

It speaks the parts of vLLM's API the probe uses: GET /v1/models, POST /v1/chat/completions with
and without `stream`, `stream_options.include_usage`, `max_tokens` (and vLLM's `min_tokens`).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.local_http import serving

KEY = "test-key-0123456789abcdef"


@dataclass(frozen=True)
class Behaviour:
    served_name: str = "llama-8b"
    ttft_seconds: float = 0.02
    itl_seconds: float = 0.005
    buffer: bool = False  # the whole stream in one write with Content-Length, as a buffering proxy sends it
    check_key: bool = True
    malformed_after: int | None = None  # a non-JSON data line after this many token events
    reported_model: str | None = None  # the model name responses carry (default: the served name)
    kv_cache_blocks: int | None = None  # serve vllm:cache_config_info on /metrics with this many blocks


def _prompt_tokens(body: dict) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", [])) + 10


class _Handler(BaseHTTPRequestHandler):
    behaviour: Behaviour
    hosts: list[str]
    protocol_version = "HTTP/1.1"

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.hosts.append(self.headers.get("Host", ""))
        return parsed

    def log_message(self, *args: object) -> None:  # quiet under pytest
        pass

    def _json(self, status: int, document: dict) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        if not self.behaviour.check_key or self.headers.get("Authorization") == f"Bearer {KEY}":
            return True
        self._json(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if self.path == "/metrics" and self.behaviour.kv_cache_blocks is not None:
            # vLLM 0.33.0's info gauge (labels abridged), open like vLLM's own /metrics.
            data = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",engine="0",'
                    f'kv_cache_size_tokens="{self.behaviour.kv_cache_blocks * 16}",'
                    f'num_gpu_blocks="{self.behaviour.kv_cache_blocks}"}} 1.0\n').encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path != "/v1/models":
            self._json(404, {"error": "not found"})
        elif self._authorised():
            self._json(200, {"object": "list", "data": [{"id": self.behaviour.served_name, "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": "not found"})
            return
        if not self._authorised():
            return
        b = self.behaviour
        if body.get("model") != b.served_name:
            self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})
            return
        tokens = int(body.get("max_tokens", 16))
        model = b.reported_model or b.served_name
        usage = {"prompt_tokens": _prompt_tokens(body), "completion_tokens": tokens,
                 "total_tokens": _prompt_tokens(body) + tokens}
        if not body.get("stream"):
            time.sleep(b.ttft_seconds + tokens * b.itl_seconds)
            self._json(200, {"id": "cmpl-1", "object": "chat.completion", "model": model, "usage": usage,
                             "choices": [{"index": 0, "message": {"role": "assistant",
                                                                  "content": " ".join(["hello"] * tokens)}}]})
            return
        self._stream(body, tokens, model, usage)

    def _stream(self, body: dict, tokens: int, model: str, usage: dict) -> None:
        b = self.behaviour
        events = []
        for index in range(tokens):
            if b.malformed_after is not None and index == b.malformed_after:
                events.append(b"data: {not json\n\n")
            chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
                     "choices": [{"index": 0, "delta": {"content": f"tok{index} "}, "finish_reason": None}]}
            events.append(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(f"data: {json.dumps({'model': model, 'choices': [], 'usage': usage})}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if b.buffer:
            time.sleep(b.ttft_seconds + tokens * b.itl_seconds)
            data = b"".join(events)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(b.ttft_seconds)
        for index, event in enumerate(events):
            if index:
                time.sleep(b.itl_seconds)
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that stops reading a stream it judged malformed closes the socket: not a server fault.
        pass


class OpenAIServer:
    """`with OpenAIServer(Behaviour(...)) as url:` serves on 127.0.0.1 at a free port; url ends in /v1. With `tls`
    (certificate and key files) it serves HTTPS; `hosts` collects the Host header of every request."""

    def __init__(self, behaviour: Behaviour, tls: tuple[Path, Path] | None = None) -> None:
        self.hosts: list[str] = []
        handler = type("Handler", (_Handler,), {"behaviour": behaviour, "hosts": self.hosts})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._serving = contextlib.ExitStack()

    def __enter__(self) -> str:
        self._serving.enter_context(serving(self._server))
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self._serving.close()
