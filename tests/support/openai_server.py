"""A small OpenAI-compatible HTTP server on 127.0.0.1 for the verification tests, with the faults a
deploy can have: a proxy that buffers the stream, no key check, malformed events, a slow engine, an
adapter left out of the list or answered by the base model.

It speaks the parts of vLLM's API the probe uses: GET /v1/models, POST /v1/chat/completions with
and without `stream`, `stream_options.include_usage`, `max_tokens` (and vLLM's `min_tokens`), and
LoRA adapters as vLLM 0.33.0 serves them: listed beside the base model, a request for one answered
with its name (vllm/entrypoints/openai/models/serving.py `model_name`), an unknown name a 404.

`ModelRouter` is one base URL in front of several servers, as `edge.routing: byModel` is: it sends each
request by its body's `model`, rewrites an alias to an adapter as the endpoint picker does, and answers
GET /v1/models itself with every name it routes, as the AI Gateway's sidecar does.

`RevisionRouter` is one model's route over two revisions (`models[].revisions`): a request with the header
`x-llm-serving-revision: <name>` goes to that revision's server, any other to the revision with the weight, as the
model's two HTTPRoutes send them (llm_serving/edge/objects.py `_revision_rules`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Callable
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
    adapters: tuple[str, ...] = ()  # LoRA adapters served beside the model, each answered with its own name
    unlisted: tuple[str, ...] = ()  # served names GET /v1/models leaves out
    answered_by_base: tuple[str, ...] = ()  # adapters whose responses carry the base model's name
    # Further served names answered with the first (vLLM's --served-model-name <model> <model>-<revision>).
    also_served_as: tuple[str, ...] = ()

    def served(self) -> tuple[str, ...]:
        return (self.served_name, *self.also_served_as, *self.adapters)


def _prompt_tokens(body: dict) -> int:
    return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", [])) + 10


class _JsonHandler(BaseHTTPRequestHandler):
    """What every local server here shares: HTTP/1.1 (keep-alive, chunked streams), no log lines, JSON answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet under pytest
        pass

    def _json(self, status: int, document: dict) -> None:
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Handler(_JsonHandler):
    behaviour: Behaviour
    hosts: list[str]

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        if parsed:
            self.hosts.append(self.headers.get("Host", ""))
        return parsed


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
            listed = [name for name in self.behaviour.served() if name not in self.behaviour.unlisted]
            self._json(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in listed]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": "not found"})
            return
        if not self._authorised():
            return
        b = self.behaviour
        asked = body.get("model")
        if asked not in b.served():
            self._json(404, {"error": {"message": f"The model `{asked}` does not exist.", "type": "NotFoundError",
                                       "param": "model", "code": 404}})
            return
        tokens = int(body.get("max_tokens", 16))
        base = b.reported_model or b.served_name
        model = base if asked in (b.served_name, *b.also_served_as) or asked in b.answered_by_base else str(asked)
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


class LocalV1Server:
    """A `_Server` on 127.0.0.1 at a free port with `handler`: `with server as url:` serves until the block ends, and
    url is its OpenAI base URL (ending in /v1)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._scheme = "http"
        self._serving = contextlib.ExitStack()

    def __enter__(self) -> str:
        self._serving.enter_context(serving(self._server))
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host}:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self._serving.close()


class OpenAIServer(LocalV1Server):
    """`with OpenAIServer(Behaviour(...)) as url:` serves on 127.0.0.1 at a free port; url ends in /v1. With `tls`
    (certificate and key files) it serves HTTPS; `hosts` collects the Host header of every request."""

    def __init__(self, behaviour: Behaviour, tls: tuple[Path, Path] | None = None) -> None:
        self.hosts: list[str] = []
        super().__init__(type("Handler", (_Handler,), {"behaviour": behaviour, "hosts": self.hosts}))
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"


class _RouterHandler(_JsonHandler):
    routes: dict[str, str]  # a name a request's `model` may carry -> the base URL (.../v1) of the server for it
    rewrites: dict[str, str]  # an alias -> the adapter the picker rewrites it to
    listed: tuple[str, ...]


    def do_GET(self) -> None:
        if self.path != "/v1/models":
            self._json(404, {"error": "not found"})
        elif self.headers.get("Authorization") != f"Bearer {KEY}":  # the gateway checks keys before the sidecar
            self._json(401, {"error": "Unauthorized"})
        else:
            self._json(200, {"object": "list", "data": [{"id": name, "object": "model"} for name in self.listed]})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.loads(raw or b"{}")
        asked = str(body.get("model"))
        upstream = self.routes.get(asked)
        if self.path != "/v1/chat/completions" or upstream is None:
            # The shape edge/by_model.py `not_found_body` gives the gateway's own 404.
            self._json(404, {"error": {"message": f"No model of this name is served here. Available models: "
                                                  f"{', '.join(self.listed)}.", "type": "NotFoundError",
                                       "param": "model", "code": 404}})
            return
        target = self.rewrites.get(asked)
        if target is not None:
            body["model"] = target
            raw = json.dumps(body).encode()

        def back(data: bytes) -> bytes:
            """What the picker does to every response chunk of a rewritten request (llm-d-router v0.10.0
            pkg/epp/handlers/server.go rewriteModelName): the adapter's name back to the alias."""
            if target is None:
                return data
            for separator in (b'":"', b'": "'):
                data = data.replace(b'"model' + separator + target.encode() + b'"',
                                    b'"model' + separator + asked.encode() + b'"')
            return data

        _relay(self, "POST", f"{upstream}/chat/completions", raw, back)


def _relay(handler: BaseHTTPRequestHandler, method: str, url: str, raw: bytes | None,
           transform: Callable[[bytes], bytes] = lambda data: data) -> None:
    """Send `handler`'s request on to `url` with its key and content type, and its answer back (each piece through
    `transform`): a stream line by line as it arrives, as the edge does (it never buffers a response)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
    try:
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("authorization", "content-type")}
        conn.request(method, parts.path, body=raw, headers=headers)
        response = conn.getresponse()
        handler.send_response(response.status)
        handler.send_header("Content-Type", response.getheader("Content-Type", "application/json"))
        if response.getheader("Transfer-Encoding") != "chunked":
            data = transform(response.read())
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for line in iter(response.readline, b""):
            line = transform(line)
            handler.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    finally:
        conn.close()


class ModelRouter:
    """`with ModelRouter(routes, rewrites) as url:` one base URL on 127.0.0.1 (ending in /v1) that sends each chat
    completion to `routes[body["model"]]` (an OpenAIServer's URL), after rewriting an alias in `rewrites` to its
    adapter, and lists every name of `routes` on GET /v1/models (or `listed`, when given)."""

    def __init__(self, routes: dict[str, str], rewrites: dict[str, str] | None = None,
                 listed: tuple[str, ...] | None = None) -> None:
        attributes = {"routes": dict(routes), "rewrites": dict(rewrites or {}),
                      "listed": tuple(routes) if listed is None else listed}
        self._server = _Server(("127.0.0.1", 0), type("Handler", (_RouterHandler,), attributes))
        self._serving = contextlib.ExitStack()

    def __enter__(self) -> str:
        self._serving.enter_context(serving(self._server))
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self._serving.close()


class _RevisionHandler(_JsonHandler):
    revisions: dict[str, str]  # a revision's name -> the base URL (.../v1) of its server
    weighted: str  # the revision requests without the header go to
    header: str

    def _upstream(self) -> str | None:
        asked = self.headers.get(self.header)
        return self.revisions.get(asked) if asked is not None else self.revisions[self.weighted]

    def _handle(self, method: str) -> None:
        upstream = self._upstream()
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))) if method == "POST" else None
        if upstream is None or not self.path.startswith("/v1/"):
            # No rule matches an unknown revision's header value: the gateway's 404.
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        _relay(self, method, upstream + self.path.removeprefix("/v1"), raw)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


class RevisionRouter:
    """`with RevisionRouter({"stable": url, "canary": url}, weighted="stable") as url:` one model's base URL on
    127.0.0.1 (ending in /v1): a request whose `header` names a revision goes to its server, one without the header to
    `weighted` (the whole weight on one revision, so a test knows where each request went)."""

    def __init__(self, revisions: dict[str, str], weighted: str, header: str = "x-llm-serving-revision") -> None:
        attributes = {"revisions": dict(revisions), "weighted": weighted, "header": header}
        self._server = _Server(("127.0.0.1", 0), type("Handler", (_RevisionHandler,), attributes))
        self._serving = contextlib.ExitStack()

    def __enter__(self) -> str:
        self._serving.enter_context(serving(self._server))
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self._serving.close()
