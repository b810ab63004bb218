"""What a deploy proves: smoke checks and a short SLO load test against an OpenAI-compatible endpoint.

Standard library only, so the deploy-gate Job runs this very file from a ConfigMap on a pinned
slim Python image with nothing to install; `python -m stacks verify` imports it. Each check is one
line (PASS/FAIL/SKIP); the load test reports TTFT and ITL p50/p95 and output tokens/s beside the
plan's figures and the objectives. Exit 0 when every check passes, 1 when one fails, 2 on bad input,
130 when Ctrl-C stopped it (the report then holds what completed, the rest `not run`). `run` is quiet
unless given a `Progress`; the Job's entry point prints `Lines` to stderr, one per check and phase.

Why not a benchmark package: guidellm 0.8.1 resolves to 97 wheels including torch 2.14.1 and the
CUDA 13 runtime (several GB), inference-perf 0.7.0 needs Python >= 3.12 and pins transformers
5.13.0 with datasets, boto3 and google-cloud-storage (checked with `pip install --dry-run --report`,
2026-12-01). Either would turn a one-minute smoke Job into a multi-GB pull to hash-lock and patch;
streaming chat requests from threads measure the same TTFT and inter-token gaps (docs/verification.md).

Length: the Job mounts this one file from a ConfigMap and runs it with no package around it, so the
HTTP and SSE client, the checks, the load generator, the progress lines and the report cannot be split
into modules.
"""

from __future__ import annotations

import argparse
import array
import http.client
import json
import math
import os
import random
import re
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

try:  # FIONREAD: how many bytes are waiting (Unix); without it each read is timed alone
    import fcntl
    import termios
except ImportError:  # pragma: no cover - Windows
    fcntl = termios = None  # type: ignore[assignment]

PASS, FAIL, SKIP = "pass", "fail", "skip"
NOT_RUN = "not run"  # a check Ctrl-C stopped, or one it stopped the run before: never a pass
INTERRUPTED = "interrupted"  # the verdict of a run Ctrl-C stopped, whatever had passed
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # what a shell reports for a command SIGINT ended (128 + 2)

# A streamed answer is judged buffered when one burst of events, each arriving within this gap of the
# one before, holds more than half of its tokens: a real engine spaces tokens by a decode step (5 ms
# and up on an H100 even for an 8B model), a buffering proxy hands over the whole body in one read.
BURST_GAP_SECONDS = 0.002
BURST_SHARE_LIMIT = 0.5
# The streamed smoke request asks for this many tokens: enough arrivals to tell a stream from a burst.
STREAM_CHECK_TOKENS = 32
# Words that are one token each in Llama 3's and most BPE vocabularies, so a prompt of N words is
# about N tokens; the exact count comes back in `usage.prompt_tokens` and is reported.
PROMPT_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more",
    "when", "will", "would", "who", "so", "no", "time", "people", "water", "city", "river", "house",
)
WRONG_KEY = "llm-serving-verify-deliberately-wrong-key"
# The load test's main thread wakes this often to count and to notice the end of the ramp: the live count
# is never staler than this, and waking more often would only cost CPU the workers' timing shares.
TICK_SECONDS = 0.25
# After Ctrl-C the workers' connections are closed under them, so they return at once; this bounds the wait
# for one stuck elsewhere (connecting, say), which is then left behind rather than holding the report back.
STOP_WAIT_SECONDS = 2.0
# The live count on a terminal, rewritten in place: often enough to look alive, seldom enough to read.
LIVE_EVERY_SECONDS = 1.0
# The count as plain lines (a pipe, a file, the Job's log): a line in the log every few seconds would bury the
# phase lines an operator reads while Pulumi waits, none for a minute would look hung.
PLAIN_EVERY_SECONDS = 10.0


class UsageError(ValueError):
    """Bad settings: reported as one line, exit 2."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped `run`: `report` holds what completed, with `interrupted: true`. A KeyboardInterrupt still, so a
    caller that does not look for it stops as it would on Ctrl-C."""

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("interrupted: results so far")
        self.report = report


@dataclass(frozen=True)
class Target:
    """One address of the model's OpenAI API: `base_url` ends in /v1."""

    name: str  # "edge", "service" or "url"
    base_url: str
    check_auth: bool = True  # False where another layer checks keys (the Service behind a gateway that does)
    # "host:port" to connect to instead of the URL's host, which TLS (SNI, certificate) and the Host header still
    # name, as curl's --connect-to: the deploy gate reaches the edge through an in-cluster Service in the `up` that
    # creates the load balancer, before DNS can point at it.
    connect_to: str | None = None
    # Names GET /v1/models must list here besides the model's own and its adapters (which vLLM lists): behind
    # `edge.routing: byModel` the AI Gateway's sidecar answers it with every name of the stack, aliases included.
    lists: tuple[str, ...] = ()
    # Requests here pass the model's endpoint picker, which rewrites an alias to one of its adapters: each alias is
    # asked here. vLLM alone (the Service) knows no alias.
    aliases: bool = False
    # Sent with every request to this address: `x-llm-serving-revision: <name>` reaches one revision of a model that
    # runs two side by side, whatever the route's weights (llm_serving/edge/objects.py REVISION_HEADER).
    headers: dict[str, str] = field(default_factory=dict)
    # Names asked here beside the adapters and aliases, each with the names its response may carry: a second
    # revision's own served name (`<model>-<revision>`), which its vLLM answers with the model's name (vLLM 0.33.0
    # vllm/entrypoints/openai/models/serving.py: `model_name` is the first served name without LoRA) and the other
    # revision's vLLM refuses with a 404 (`_check_model`: not one of its served names), so a request the header rule
    # sent to the wrong revision fails where the model's own name would pass either way. The endpoint picker passes a
    # name it has no InferenceObjective for with the default one (llm-d-router v0.10.0
    # pkg/epp/requestcontrol/director.go `getInferenceObjective`).
    asks: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Alias:
    """A name the endpoint picker rewrites to one of `targets` (the model's adapters) before vLLM sees it."""

    name: str
    targets: tuple[str, ...]


@dataclass(frozen=True)
class LoadPlan:
    """The load test: closed loop at `concurrency`, figures from the planner to compare with."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    duration_seconds: float
    ramp_seconds: float  # starts are spread over this and requests started in it are warm-up
    max_requests: int | None = None
    planned: dict[str, float] = field(default_factory=dict)  # ttft_ms, itl_ms, tpot_ms, output_tokens_per_second
    objectives: dict[str, float] = field(default_factory=dict)  # ttft_p95_ms, itl_p95_ms


@dataclass(frozen=True)
class Settings:
    model: str  # the served model name
    targets: tuple[Target, ...]
    load: LoadPlan | None = None
    load_target: str | None = None  # which target carries the load test (default: the last)
    request_timeout_seconds: float = 120.0
    # A model that scales to zero: the planned wake, which the first request through the edge may take.
    wake_seconds: float | None = None
    # What the report should say about the load (why it is capped, or why there is none).
    note: str | None = None
    # The model's LoRA adapters (vLLM lists each and answers a request for one with its name) and the aliases over
    # them: with the model's own name, every name a request's `model` may carry to reach this model.
    adapters: tuple[str, ...] = ()
    aliases: tuple[Alias, ...] = ()
    # The revision under test when the model runs two side by side (`models[].revisions[].name`); None: the model.
    revision: str | None = None
    # What the stack deployed when it wrote these settings (llm_serving/stack/model_parts.py `gate_fingerprint`),
    # echoed in the report so that `python -m stacks promote` can refuse a report of another deploy; None: unknown.
    deployed: str | None = None

    @staticmethod
    def from_json(document: dict[str, Any]) -> Settings:
        """The Job's settings file (what `to_json` wrote); a missing or wrong key is a UsageError."""
        try:
            load = document.get("load")
            return Settings(
                model=str(document["model"]),
                targets=tuple(Target(**{**t, "lists": tuple(t.get("lists", ())),
                                        "headers": {str(k): str(v) for k, v in t.get("headers", {}).items()},
                                        "asks": tuple((str(name), tuple(str(a) for a in answers))
                                                      for name, answers in t.get("asks", ()))})
                              for t in document["targets"]),
                adapters=tuple(str(a) for a in document.get("adapters", ())),
                aliases=tuple(Alias(str(a["name"]), tuple(str(t) for t in a["targets"]))
                              for a in document.get("aliases", ())),
                load=LoadPlan(**load) if load else None,
                load_target=document.get("load_target"),
                request_timeout_seconds=float(document.get("request_timeout_seconds", 120.0)),
                wake_seconds=float(document["wake_seconds"]) if document.get("wake_seconds") is not None else None,
                note=str(document["note"]) if document.get("note") is not None else None,
                revision=str(document["revision"]) if document.get("revision") is not None else None,
                deployed=str(document["deployed"]) if document.get("deployed") is not None else None,
            )
        except (KeyError, TypeError, ValueError) as error:
            raise UsageError(f"settings: {error!r}; expected model, targets[] and optionally load") from None

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        for target in document["targets"]:
            if not target["asks"]:
                del target["asks"]  # only a second revision's targets ask for more
        return document

    def asked(self, target: Target) -> list[tuple[str, tuple[str, ...]]]:
        """The names asked through `target` beside the model's own, each with the names its response may carry:
        every adapter (its own name), and where the target passes the endpoint picker every alias (the alias: the
        picker writes it back into the response, see check_route; or one of its adapters, where a `"model"` field
        was split between two chunks the picker rewrites one by one)."""
        asked = [(adapter, (adapter,)) for adapter in self.adapters]
        if target.aliases:
            asked += [(alias.name, (alias.name, *alias.targets)) for alias in self.aliases]
        return asked + list(target.asks)

    def listed(self, target: Target) -> tuple[str, ...]:
        """The names GET /v1/models must list at `target` besides the model: its adapters (vLLM lists the adapters
        it loaded: vllm/entrypoints/openai/models/serving.py `show_available_models`), then the target's own."""
        return tuple(dict.fromkeys((*self.adapters, *target.lists)))


@dataclass
class Check:
    target: str
    name: str
    verdict: str
    message: str
    measured: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.verdict.upper():4} {self.target} {self.name}: {self.message}"


# ----------------------------------------------------------------------------------------------
# Progress


@dataclass(frozen=True)
class LoadCount:
    """The load test so far."""

    target: str
    done: int  # requests that completed, warm-up ones included
    failed: int
    elapsed_seconds: float
    planned_seconds: float  # the ramp and the steady window

    def line(self) -> str:
        return (f"{self.target} load: {self.done} done, {self.failed} failed, "
                f"{self.elapsed_seconds:.0f} of {self.planned_seconds:.0f} s")


class Progress:
    """What `run` says as it goes: this one says nothing, so the library is quiet unless a caller asks (`Lines`)."""

    def phase(self, text: str) -> None:
        """A check or a phase of the load test started or ended: one line's worth."""

    def load(self, count: LoadCount) -> None:
        """The load test's count, offered every tick; the reporter decides how often to show it."""


class Lines(Progress):
    """Progress as lines on a text stream (stderr: stdout is the report's), each after the seconds since it began.
    The load count is shown at most every `every` seconds after the last line: with `live` (a terminal) as one line
    rewritten in place with a carriage return, otherwise as plain lines, as a pipe or a log wants them."""

    def __init__(self, stream: Any, live: bool = False, every: float | None = None) -> None:
        self.stream, self.live = stream, live
        self.every = (LIVE_EVERY_SECONDS if live else PLAIN_EVERY_SECONDS) if every is None else every
        self._began = self._last = time.monotonic()
        self._open = 0  # the width of the count a terminal shows on the current line; 0: none is open

    def _stamped(self, text: str) -> str:
        return f"[{time.monotonic() - self._began:6.1f} s] {text}"

    def _write(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            self.stream.write(text)
            self.stream.flush()  # a line nobody sees until the run ends is no progress
        except OSError:
            # Its reader went away (`2>&1 | head`): the progress ends there, the run and its report to stdout do not.
            self.stream = None

    def phase(self, text: str) -> None:
        if self._open:  # the count stays on screen, as it stood, above the next line
            self._write("\n")
            self._open = 0
        self._write(self._stamped(text) + "\n")
        self._last = time.monotonic()

    def load(self, count: LoadCount) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        text = self._stamped(count.line())
        if self.live:
            self._write("\r" + text.ljust(self._open))  # padded over a longer count it replaces
            self._open = len(text)
        else:
            self._write(text + "\n")


# ----------------------------------------------------------------------------------------------
# HTTP


# (host, port) of a URL -> the (host, port) to connect to instead, from the targets' `connect_to` (run() fills it).
CONNECT_TO: dict[tuple[str, int], tuple[str, int]] = {}


def _address(connect_to: str) -> tuple[str, int]:
    host, _, port = connect_to.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"connect_to {connect_to!r}: expected host:port")
    return host, int(port)


class _ConnectToHTTPS(http.client.HTTPSConnection):
    """HTTPS to another address than the URL's host, with SNI, certificate check and Host header for the URL's."""

    def __init__(self, host: str, port: int | None, address: tuple[str, int], **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection(self._address, self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _ConnectToHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, address: tuple[str, int], **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection(self._address, self.timeout)


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"url {url!r}: expected http://host[:port]/path or https://...")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default_port = 443 if parts.scheme == "https" else 80
    address = CONNECT_TO.get((parts.hostname, parts.port or default_port))
    if parts.scheme == "https":
        context = ssl.create_default_context()
        if address is not None:
            return _ConnectToHTTPS(parts.hostname, parts.port, address, timeout=timeout, context=context), path
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=context), path
    if address is not None:
        return _ConnectToHTTP(parts.hostname, parts.port, address, timeout=timeout), path
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout), path


def _headers(key: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(extra or {})}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _request(url: str, key: str | None, timeout: float, body: dict | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of one whole request, with `headers` besides the probe's own; network errors
    raise OSError."""
    conn, path = _connection(url, timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request("POST" if body is not None else "GET", path, body=data, headers=_headers(key, headers))
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        conn.close()


@dataclass
class Stream:
    """One streamed chat completion as it arrived."""

    status: int = 0
    content_type: str = ""
    sent_at: float = 0.0
    token_times: list[float] = field(default_factory=list)  # arrival of each event that carries text
    events: int = 0
    done: bool = False
    models: set[str] = field(default_factory=set)
    usage: dict[str, Any] | None = None
    text: str = ""
    error: str | None = None  # malformed stream, HTTP error body or network error
    body: bytes = b""


class _InFlight:
    """The load test's open connections, so that a stop can close them under the workers reading them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self.closed = False

    def add(self, conn: http.client.HTTPConnection) -> bool:
        """Hold `conn` (connected) until `discard`; False once the test stopped: send nothing more."""
        with self._lock:
            if not self.closed:
                self._open.add(conn)
            return not self.closed

    def discard(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)

    def close(self) -> None:
        """Shut every open connection down: each worker's read returns at once, and the server sees the client
        go, as vLLM does when a client disconnects, and stops generating for it."""
        with self._lock:
            self.closed = True
            for conn in self._open:
                if conn.sock is not None:
                    try:  # the socket's own shutdown, under TLS too: the worker's read then fails with an OSError
                        socket.socket.shutdown(conn.sock, socket.SHUT_RDWR)
                    except OSError:  # closed already
                        pass


def stream_chat(url: str, key: str | None, body: dict, timeout: float, in_flight: _InFlight | None = None,
                headers: dict[str, str] | None = None) -> Stream:
    """POST a `stream: true` chat completion, with `headers` besides the probe's own, and timestamp every server-sent
    event as it arrives. `in_flight` (the load test's) holds the connection while it is open."""
    result = Stream()
    try:
        conn, path = _connection(url, timeout)
    except UsageError as error:
        result.error = str(error)
        return result
    try:
        result.sent_at = time.perf_counter()
        conn.response_class = _TimedResponse
        conn.connect()  # here rather than in request(), so that a stop finds the socket to shut down
        if in_flight is not None and not in_flight.add(conn):
            result.error = "stopped before it was sent"
            return result
        conn.request("POST", path, body=json.dumps(body).encode(), headers=_headers(key, headers))
        response = conn.getresponse()
        result.status, result.content_type = response.status, response.getheader("Content-Type", "")
        if response.status != 200:
            result.body = response.read()[:300]
            result.error = f"HTTP {response.status}: {result.body.decode(errors='replace')}"
            return result
        _read_events(response, result, response.arrived)  # type: ignore[attr-defined]
    except (OSError, http.client.HTTPException) as error:
        result.error = f"{type(error).__name__}: {error}"
    finally:
        if in_flight is not None:
            in_flight.discard(conn)
        conn.close()
    return result


class _TimedResponse(http.client.HTTPResponse):
    """An HTTPResponse that knows when the bytes it hands out reached the client: `arrived()` is when
    the line just read arrived, never earlier than it did.

    That is the time of the socket read that returned it, unless all of that read's bytes were already
    waiting (counted) when an earlier read returned: then the time they were counted. Timing the parse
    instead spread a buffered body over however long the client was held up between lines, by another
    of its threads or a busy CPU (a preempted parse put 3 ms between two events of one burst: 97% in one
    burst instead of 100%); timing each read alone split a buffered body bigger than the reader's 8 KiB
    buffer into one burst per read (a 256-token answer, 60 KB, into eight); and taking the earlier time
    for every read while bytes were waiting stamped the ones that came in later too early (up to half a
    second for a client slower than the stream, which then looked buffered).
    """

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)  # type: ignore[arg-type]
        self._arrived = time.perf_counter()
        self._counted_at, self._counted = 0.0, 0  # when bytes were seen waiting, how many are left of them
        raw = self.fp.raw  # the SocketIO under the buffered reader every read of the response goes through
        read_into = raw.readinto

        def timed_read_into(buffer: Any) -> int | None:
            count = read_into(buffer)
            now = time.perf_counter()
            if count and count <= self._counted:  # all of it was waiting when counted
                self._arrived, self._counted = self._counted_at, self._counted - count
            else:  # some of it came in since: the line this read ends may have too
                self._arrived, self._counted = now, 0
            if not self._counted:
                self._counted_at, self._counted = now, _bytes_waiting(sock)
            return count

        raw.readinto = timed_read_into

    def arrived(self) -> float:
        return self._arrived


def _bytes_waiting(sock: socket.socket) -> int:
    """Bytes readable now without waiting: in the kernel's buffer (FIONREAD) and, on TLS, decrypted
    already; 0 where that cannot be asked. On TLS the kernel's count includes each record's framing, so
    at most that much (some 30 bytes a record) of a later record can take the earlier time."""
    if fcntl is None:
        return 0
    try:
        waiting = array.array("i", [0])
        fcntl.ioctl(sock.fileno(), termios.FIONREAD, waiting, True)
        pending = getattr(sock, "pending", None)
        return waiting[0] + (pending() if pending is not None else 0)
    except (OSError, ValueError):  # closed under us: nothing more will arrive
        return 0


def _read_events(response: http.client.HTTPResponse, result: Stream,
                 arrival: Callable[[], float] = time.perf_counter) -> None:
    """Server-sent events: `data: <json>` lines, blank separators, `:` comments, then `data: [DONE]`.
    `arrival()`: when the line just read arrived."""
    while True:
        raw = response.readline()
        if not raw:
            return
        arrived = arrival()
        line = raw.decode(errors="replace").rstrip("\r\n")
        if not line or line.startswith(":") or line.split(":", 1)[0] in ("event", "id", "retry"):
            continue
        if not line.startswith("data:"):
            result.error = f"line {line[:80]!r} is not a server-sent event (expected 'data: ...')"
            return
        payload = line[5:].strip()
        if result.done:
            result.error = "events after data: [DONE]"
            return
        if payload == "[DONE]":
            result.done = True
            continue
        result.events += 1
        try:
            event = json.loads(payload)
        except json.JSONDecodeError:
            result.error = f"event {result.events} is not JSON: {payload[:80]!r}"
            return
        if not isinstance(event, dict):
            result.error = f"event {result.events} is not a JSON object: {payload[:80]!r}"
            return
        if "error" in event:
            result.error = f"event {result.events} is an error: {json.dumps(event['error'])[:200]}"
            return
        if event.get("model"):
            result.models.add(str(event["model"]))
        if event.get("usage"):
            result.usage = event["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or ""
            if text:
                result.text += text
                result.token_times.append(arrived)
                break


def largest_burst_share(times: list[float], gap: float = BURST_GAP_SECONDS) -> float:
    """The share of arrivals in the largest run whose members each came within `gap` of the previous."""
    if not times:
        return 0.0
    largest = run = 1
    for before, after in zip(times, times[1:], strict=False):
        run = run + 1 if after - before <= gap else 1
        largest = max(largest, run)
    return largest / len(times)


def chat_body(model: str, prompt: str, max_tokens: int, stream: bool, exact: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}],
                            "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if exact:
        # vLLM's sampling extensions: exactly max_tokens tokens, so every request is the planned length.
        body.update({"min_tokens": max_tokens, "ignore_eos": True})
    return body


# ----------------------------------------------------------------------------------------------
# Smoke checks


def check_models(target: Target, model: str, key: str, timeout: float, also: tuple[str, ...] = ()) -> Check:
    """GET /v1/models lists the model and every name in `also` (its adapters, and what else this address lists):
    each missing one is named."""
    url = f"{target.base_url}/models"
    try:
        status, _, body = _request(url, key, timeout, headers=target.headers)
    except (OSError, http.client.HTTPException) as error:
        return Check(target.name, "models", FAIL, f"GET {url}: {type(error).__name__}: {error}")
    if status != 200:
        return Check(target.name, "models", FAIL, f"GET /v1/models with the key answered {status}, expected 200: "
                     f"{body[:200].decode(errors='replace')}")
    try:
        served = [str(m.get("id")) for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        return Check(target.name, "models", FAIL, f"GET /v1/models is not an OpenAI model list: {body[:120]!r}")
    if model not in served:
        return Check(target.name, "models", FAIL, f"GET /v1/models lists {served}, not the served name {model!r}",
                     {"served": served})
    expected = list(dict.fromkeys((model, *also)))
    missing = [name for name in expected if name not in served]
    if missing:
        return Check(target.name, "models", FAIL, f"GET /v1/models lacks {', '.join(map(repr, missing))}: it "
                     f"lists {served}", {"served": served, "missing": missing})
    return Check(target.name, "models", PASS, f"lists {', '.join(expected)}", {"served": served})


def check_route(target: Target, name: str, answers: tuple[str, ...], key: str, timeout: float) -> Check:
    """One streamed completion asking for `name` (a LoRA adapter, an alias, or a name of `Target.asks`) through this
    address: it must stream to [DONE], and every event's `model` must be one of `answers`. vLLM 0.33.0 answers a
    request for an adapter with the adapter's name (vllm/entrypoints/openai/chat_completion/serving.py
    `_create_chat_completion`: model_name = self.models.model_name(lora_request); openai/models/serving.py
    `model_name` returns lora_request.lora_name), and the endpoint picker rewrites an alias in the request body to
    one of its adapters before vLLM sees it (llm-d-router v0.10.0 pkg/epp/requestcontrol/director.go
    `modelRewriteIfNeeded`), then writes the alias back into every response chunk (pkg/epp/handlers/server.go
    `rewriteModelName`, a byte replace of `"model":"<adapter>"` per chunk), so an alias answers with its own name.
    Any other name is another backend than the one asked for: a misrouted request, or an adapter vLLM did not apply
    (the base model answering). The tokens are exact (vLLM's min_tokens and ignore_eos): a task fine-tune may end
    its answer to this prompt at once, which says nothing of the route."""
    check = f"route {name}"
    body = chat_body(name, "Say hello.", 8, stream=True, exact=True)
    got = stream_chat(f"{target.base_url}/chat/completions", key, body, timeout, headers=target.headers)
    accepted = " or ".join(map(repr, answers))
    if got.error:
        return Check(target.name, check, FAIL, f"asked for {name!r}: {got.error}")
    if not got.done or not got.token_times:
        return Check(target.name, check, FAIL, f"asked for {name!r}: the stream ended after {got.events} events "
                     f"and {len(got.token_times)} tokens{'' if got.done else ', without data: [DONE]'}")
    wrong = sorted(got.models - set(answers))
    if wrong or not got.models:
        named = f"names {', '.join(map(repr, wrong))}" if wrong else "names no model"
        return Check(target.name, check, FAIL, f"asked for {name!r}, the response {named}: another backend than "
                     f"the one asked for (expected {accepted})", {"models": sorted(got.models)})
    return Check(target.name, check, PASS, f"{len(got.token_times)} tokens streamed, answered by "
                 f"{', '.join(sorted(got.models))}", {"models": sorted(got.models)})


def check_auth(target: Target, key: str, timeout: float) -> Check:
    if not target.check_auth:
        return Check(target.name, "auth", SKIP, "keys are checked in front of this address, not by it")
    url = f"{target.base_url}/models"
    answers: dict[str, int] = {}
    for label, candidate in (("no key", None), ("a wrong key", WRONG_KEY)):
        try:
            answers[label] = _request(url, candidate, timeout, headers=target.headers)[0]
        except (OSError, http.client.HTTPException) as error:
            return Check(target.name, "auth", FAIL, f"GET /v1/models with {label}: {type(error).__name__}: {error}")
    open_to = [f"{label} answered {status}" for label, status in answers.items() if status not in (401, 403)]
    if open_to:
        return Check(target.name, "auth", FAIL, f"GET /v1/models with {' and '.join(open_to)}, expected 401 or 403: "
                     "the API key is not enforced", {"answers": answers})
    return Check(target.name, "auth", PASS, "no key and a wrong key are refused "
                 f"({answers['no key']}, {answers['a wrong key']})", {"answers": answers})


def check_stream(target: Target, model: str, key: str, timeout: float) -> tuple[Check, Stream]:
    body = chat_body(model, "Count from one to fifty in words, separated by spaces.", STREAM_CHECK_TOKENS,
                     stream=True, exact=True)
    got = stream_chat(f"{target.base_url}/chat/completions", key, body, timeout, headers=target.headers)
    name = "stream"
    if got.error and not got.token_times:
        return Check(target.name, name, FAIL, f"streamed chat completion: {got.error}"), got
    if got.error:
        return Check(target.name, name, FAIL, f"malformed stream after {len(got.token_times)} tokens: {got.error}"), got
    if "text/event-stream" not in got.content_type:
        return Check(target.name, name, FAIL, f"Content-Type {got.content_type!r}, expected text/event-stream"), got
    if not got.done:
        return Check(target.name, name, FAIL, f"stream ended after {got.events} events without data: [DONE] "
                     "(cut by a timeout or a proxy?)"), got
    if len(got.token_times) < 2:
        return Check(target.name, name, FAIL, f"only {len(got.token_times)} token event(s) in the stream; "
                     f"asked for {STREAM_CHECK_TOKENS}"), got
    first = got.token_times[0] - got.sent_at
    last = got.token_times[-1] - got.sent_at
    share = largest_burst_share(got.token_times)
    measured = {"tokens": len(got.token_times), "first_token_seconds": round(first, 4),
                "last_token_seconds": round(last, 4), "largest_burst_share": round(share, 3)}
    if share > BURST_SHARE_LIMIT:
        return Check(target.name, name, FAIL, f"{share:.0%} of {len(got.token_times)} tokens arrived in one burst "
                     f"at {last:.2f} s (first {first:.2f} s): the response is buffered by a proxy, so clients "
                     "see no token until the end (docs/request-path.md)", measured), got
    return Check(target.name, name, PASS, f"{len(got.token_times)} tokens streamed from {first * 1000:.0f} ms to "
                 f"{last * 1000:.0f} ms, ending in [DONE]", measured), got


def check_wake(target: Target, model: str, key: str, wake_seconds: float, timeout: float) -> Check:
    """A model that scales to zero: one streamed request through the edge, whose first token must come within the
    planned wake (the picker holds it while the model starts; an awake model answers in seconds)."""
    body = chat_body(model, "Say hello.", 8, stream=True)
    got = stream_chat(f"{target.base_url}/chat/completions", key, body, wake_seconds + timeout,
                      headers=target.headers)
    if not got.token_times:
        return Check(target.name, "wake", FAIL, f"no token within the planned wake of {wake_seconds:.0f} s "
                     f"(+{timeout:.0f} s): {got.error or 'the stream ended empty'}")
    first = got.token_times[0] - got.sent_at
    measured = {"first_token_seconds": round(first, 3), "planned_wake_seconds": wake_seconds}
    if first > wake_seconds:
        return Check(target.name, "wake", FAIL, f"first token after {first:.0f} s, beyond the planned wake of "
                     f"{wake_seconds:.0f} s: the clients' requests would time out first", measured)
    return Check(target.name, "wake", PASS, f"first token after {first:.1f} s, within the planned wake of "
                 f"{wake_seconds:.0f} s (seconds: the model was awake)", measured)


def check_completion(target: Target, model: str, key: str, timeout: float) -> tuple[Check, dict | None]:
    body = chat_body(model, "Say hello.", 16, stream=False)
    try:
        status, content_type, raw = _request(f"{target.base_url}/chat/completions", key, timeout, body,
                                             target.headers)
    except (OSError, http.client.HTTPException) as error:
        return Check(target.name, "completion", FAIL, f"chat completion: {type(error).__name__}: {error}"), None
    if status != 200:
        return Check(target.name, "completion", FAIL, f"chat completion answered {status}: "
                     f"{raw[:200].decode(errors='replace')}"), None
    try:
        answer = json.loads(raw)
        text = answer["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return Check(target.name, "completion", FAIL, f"not a chat completion ({content_type}): {raw[:120]!r}"), None
    if not isinstance(text, str) or not text:
        return Check(target.name, "completion", FAIL, "chat completion with empty content"), answer
    return Check(target.name, "completion", PASS, f"answered {len(text)} characters"), answer


def check_fields(target: Target, model: str, streamed: Stream, answer: dict | None) -> Check:
    """Both responses name the served model; usage adds up and covers what was streamed."""
    if answer is None and not streamed.events:
        return Check(target.name, "fields", SKIP, "no response arrived to check (see the checks above)")
    problems = []
    if answer is not None:
        if answer.get("model") != model:
            problems.append(f"non-streamed model {answer.get('model')!r}")
        usage = answer.get("usage") or {}
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if not (isinstance(prompt, int) and isinstance(completion, int) and prompt > 0 and 0 < completion <= 16):
            problems.append(f"non-streamed usage {usage} (expected prompt_tokens > 0, 0 < completion_tokens <= 16)")
        elif usage.get("total_tokens") != prompt + completion:
            problems.append(f"non-streamed usage total_tokens {usage.get('total_tokens')} != {prompt} + {completion}")
    if streamed.models - {model} or (streamed.events and not streamed.models):
        problems.append(f"streamed model {sorted(streamed.models)}")
    if answer is not None and answer.get("model") != model or streamed.models - {model}:
        # vLLM names the base model it served (openai/models/serving.py `model_name`): another name is another
        # backend, one the edge routed this model's name to.
        problems.append("another backend than the one asked for answered")
    if streamed.done:
        usage = streamed.usage or {}
        completion = usage.get("completion_tokens")
        if not isinstance(completion, int):
            problems.append("stream carried no usage (stream_options.include_usage)")
        elif not len(streamed.token_times) <= completion <= STREAM_CHECK_TOKENS:
            problems.append(f"streamed usage completion_tokens {completion} for {len(streamed.token_times)} "
                            f"token events (max_tokens {STREAM_CHECK_TOKENS})")
    if problems:
        return Check(target.name, "fields", FAIL, f"expected model {model!r} and consistent usage: "
                     + "; ".join(problems))
    return Check(target.name, "fields", PASS, f"model {model} and usage consistent")


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def engine_cache(target: Target, timeout: float) -> dict[str, int] | None:
    """The KV cache the engine allocated, from vLLM's `vllm:cache_config_info` labels on /metrics
    (vLLM 0.33.0: kv_cache_size_tokens, kv_cache_memory_bytes, num_gpu_blocks, block_size). Only a
    Service serves /metrics: the edge publishes /v1 alone, so elsewhere this is None."""
    url = target.base_url.removesuffix("/v1") + "/metrics"
    try:
        status, _, body = _request(url, None, timeout, headers=target.headers)
    except (OSError, http.client.HTTPException, UsageError):
        return None
    if status != 200:
        return None
    for line in body.decode(errors="replace").splitlines():
        if line.startswith("vllm:cache_config_info{"):
            labels = dict(_LABEL.findall(line))
            found = {k: int(labels[k]) for k in ("kv_cache_size_tokens", "kv_cache_memory_bytes", "num_gpu_blocks",
                                                  "block_size") if labels.get(k, "").isdigit()}
            if "kv_cache_size_tokens" not in found and {"num_gpu_blocks", "block_size"} <= set(found):
                found["kv_cache_size_tokens"] = found["num_gpu_blocks"] * found["block_size"]
            return found or None
    return None


SMOKE_CHECKS = ("models", "auth", "stream", "completion", "fields")


class _Steps:
    """One run's checks as they happen: each told to `progress` as it starts and ends, and, for a run Ctrl-C cut
    short, which one was running and which had not started."""

    def __init__(self, progress: Progress, planned: list[tuple[str, str]]) -> None:
        self.progress, self.planned = progress, planned  # planned: (target, check name) in the order they run
        self.checks: list[Check] = []
        self.running: tuple[str, str] | None = None

    def check(self, target: str, name: str, doing: str, call: Callable[[], Any]) -> Any:
        """`call()` returns a Check, or a Check and what a later check reads; this returns what it returned."""
        self.running = (target, name)
        self.progress.phase(f"{target} {name}: {doing}")
        began = time.perf_counter()
        outcome = call()
        check = outcome[0] if isinstance(outcome, tuple) else outcome
        self.checks.append(check)
        self.running = None
        self.progress.phase(f"{target} {name}: {check.verdict.upper()} ({time.perf_counter() - began:.1f} s)")
        return outcome

    def not_run(self) -> list[Check]:
        """A `not run` check for each planned one that has no verdict."""
        done = {(c.target, c.name) for c in self.checks}
        return [Check(target, name, NOT_RUN, "interrupted while it ran" if (target, name) == self.running
                      else "interrupted before it started") for target, name in self.planned
                if (target, name) not in done]


def smoke(target: Target, settings: Settings, key: str, timeout: float, steps: _Steps) -> None:
    """The smoke checks on one address: its listing of every name, the model's stream, completion and fields, then
    one streamed completion per adapter and alias asked there (`Settings.asked`)."""
    name, model = target.name, settings.model
    also = settings.listed(target)
    steps.check(name, "models", "GET /v1/models with the key" + (f", listing {len(also) + 1} names" if also else ""),
                lambda: check_models(target, model, key, timeout, also))
    steps.check(name, "auth", "GET /v1/models with no key, then a wrong key" if target.check_auth else "skipped",
                lambda: check_auth(target, key, timeout))
    _, streamed = steps.check(name, "stream", f"a streamed chat completion of {STREAM_CHECK_TOKENS} tokens",
                              lambda: check_stream(target, model, key, timeout))
    _, answer = steps.check(name, "completion", "a chat completion, not streamed",
                            lambda: check_completion(target, model, key, timeout))
    steps.check(name, "fields", "model and usage of both answers",
                lambda: check_fields(target, model, streamed, answer))
    for asked, answers in settings.asked(target):
        steps.check(name, f"route {asked}", f"a streamed chat completion asking for {asked}",
                    lambda asked=asked, answers=answers: check_route(target, asked, answers, key, timeout))


# ----------------------------------------------------------------------------------------------
# Load test


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _prompt(words: int, rng: random.Random) -> str:
    # A random lead makes every prompt unique, so prefix caching cannot shorten its prefill.
    return f"Request {rng.getrandbits(64):016x}. Continue this text: " + " ".join(
        rng.choice(PROMPT_WORDS) for _ in range(max(1, words - 8)))


@dataclass
class _Sample:
    started: float
    warmup: bool
    stream: Stream


def _failed(stream: Stream) -> bool:
    return bool(stream.error) or not stream.done


def run_load(target: Target, model: str, key: str, load: LoadPlan, timeout: float,
             progress: Progress | None = None) -> dict[str, Any]:
    """Closed loop: `concurrency` workers, starts spread over the ramp, each sending its next request
    when the last ends, until `duration_seconds` after the ramp (or `max_requests`).

    Ctrl-C (KeyboardInterrupt in this, the main thread) stops it: the workers are told to stop, their connections
    closed, and they are waited for at most STOP_WAIT_SECONDS; the result is what completed before, with
    `interrupted: true`. The requests the stop cut are neither results nor errors."""
    progress = progress or Progress()
    url = f"{target.base_url}/chat/completions"
    samples: list[_Sample] = []
    lock = threading.Lock()
    stopping, in_flight = threading.Event(), _InFlight()
    begin = time.perf_counter()
    ramp_end = begin + load.ramp_seconds
    stop = ramp_end + load.duration_seconds
    sent, failed = [0], [0]

    def worker(index: int) -> None:
        rng = random.Random(index)
        if stopping.wait(load.ramp_seconds * index / max(1, load.concurrency)):
            return
        while time.perf_counter() < stop and not stopping.is_set():
            started = time.perf_counter()
            with lock:
                # `max_requests` counts measured requests: warm-up ones are on top.
                if started >= ramp_end:
                    if load.max_requests is not None and sent[0] >= load.max_requests:
                        return
                    sent[0] += 1
            body = chat_body(model, _prompt(load.prompt_tokens, rng), load.output_tokens, stream=True, exact=True)
            result = stream_chat(url, key, body, timeout, in_flight, target.headers)
            with lock:
                if stopping.is_set() and _failed(result):
                    return  # cut by the stop: it says nothing about the endpoint
                samples.append(_Sample(started, started < ramp_end, result))
                failed[0] += _failed(result)

    def count(done: int | None = None, bad: int | None = None) -> LoadCount:
        if done is None or bad is None:
            with lock:
                done, bad = len(samples) - failed[0], failed[0]
        return LoadCount(target.name, done, bad, time.perf_counter() - begin,
                         load.ramp_seconds + load.duration_seconds)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(load.concurrency)]
    started_threads: list[threading.Thread] = []
    interrupted, steady = False, False
    try:
        progress.phase(f"{target.name} load: ramp: {load.concurrency} concurrent streamed requests of "
                       f"{load.prompt_tokens} + {load.output_tokens} tokens, starting over {load.ramp_seconds:g} s "
                       "(warm-up)")
        for thread in threads:
            thread.start()
            started_threads.append(thread)
        while alive := [t for t in threads if t.is_alive()]:
            if not steady and time.perf_counter() >= ramp_end:
                steady = True
                cap = f" or {load.max_requests} requests" if load.max_requests is not None else ""
                progress.phase(f"{target.name} load: steady: measuring for {load.duration_seconds:g} s{cap}")
            progress.load(count())
            alive[0].join(TICK_SECONDS)
    except KeyboardInterrupt:
        interrupted = True
        progress.phase(f"{target.name} load: interrupted: stopping the requests in flight")
    finally:
        # However the loop ended (done, Ctrl-C, an error): no worker outlives the test.
        stopping.set()
        in_flight.close()
        give_up = time.perf_counter() + STOP_WAIT_SECONDS
        try:
            for thread in started_threads:
                thread.join(max(0.0, give_up - time.perf_counter()))
        except KeyboardInterrupt:  # Ctrl-C (again, or first as the last requests ended): the report now
            interrupted = True
    with lock:
        taken = list(samples)  # a straggler that returns later adds to `samples`, not to this report
    result = summarise(taken, ramp_end, load)
    result["interrupted"] = interrupted
    bad = sum(_failed(s.stream) for s in taken)
    final = count(len(taken) - bad, bad)
    if interrupted:
        result["stopped_after_seconds"] = round(final.elapsed_seconds, 1)
        left = sum(t.is_alive() for t in started_threads)
        progress.phase(f"{target.name} load: stopped: {final.done} done, {final.failed} failed, after "
                       f"{final.elapsed_seconds:.1f} of {final.planned_seconds:g} s"
                       + (f"; {left} request(s) still open left behind" if left else ""))
    else:
        progress.phase(f"{target.name} load: finished: {final.done} done, {final.failed} failed "
                       f"({final.elapsed_seconds:.1f} s)")
    return result


def summarise(samples: list[_Sample], window_start: float, load: LoadPlan) -> dict[str, Any]:
    errors = [s.stream.error or "no data: [DONE]" for s in samples if s.stream.error or not s.stream.done]
    completed = [s for s in samples if not s.stream.error and s.stream.done and s.stream.token_times]
    measured = [s for s in completed if not s.warmup]
    # Requests slower than the whole test leave none after the ramp: judge the warm-up ones rather than none.
    warmup_included = not measured and bool(completed)
    measured = measured or completed
    ttft = [(s.stream.token_times[0] - s.stream.sent_at) * 1000 for s in measured]
    itl = [(b - a) * 1000 for s in measured for a, b in zip(s.stream.token_times, s.stream.token_times[1:],
                                                             strict=False)]
    tpot = [(s.stream.token_times[-1] - s.stream.token_times[0]) * 1000 / (len(s.stream.token_times) - 1)
            for s in measured if len(s.stream.token_times) > 1]
    # Throughput over the steady window: tokens (from usage, spread over their arrivals) that arrived in it.
    tokens_in_window = 0.0
    window_end = max((s.stream.token_times[-1] for s in samples if s.stream.token_times), default=window_start)
    for s in samples:
        times = s.stream.token_times
        if not times:
            continue
        weight = ((s.stream.usage or {}).get("completion_tokens") or len(times)) / len(times)
        tokens_in_window += weight * sum(1 for t in times if t >= window_start)
    window = max(1e-9, window_end - window_start)
    prompts = [(s.stream.usage or {}).get("prompt_tokens") for s in measured]
    outputs = [(s.stream.usage or {}).get("completion_tokens") for s in measured]

    def rounded(value: float | None, digits: int = 1) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "target_concurrency": load.concurrency,
        "requests": len(measured), "warmup_requests": sum(1 for s in samples if s.warmup), "errors": len(errors),
        "warmup_included": warmup_included,
        "error_samples": sorted(set(errors))[:3],
        "window_seconds": round(window, 1),
        "prompt_tokens_mean": rounded(_mean([p for p in prompts if isinstance(p, int)])),
        "output_tokens_mean": rounded(_mean([o for o in outputs if isinstance(o, int)])),
        "ttft_ms": {"p50": rounded(percentile(ttft, 0.5)), "p95": rounded(percentile(ttft, 0.95))},
        "itl_ms": {"p50": rounded(percentile(itl, 0.5), 2), "p95": rounded(percentile(itl, 0.95), 2)},
        "tpot_ms": {"p50": rounded(percentile(tpot, 0.5), 2)},
        "output_tokens_per_second": rounded(tokens_in_window / window if measured else 0.0),
        "buffered_requests": sum(1 for s in measured if largest_burst_share(s.stream.token_times) > BURST_SHARE_LIMIT),
    }


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


# (label, measured path, planned key, objective key)
COMPARED = (
    ("TTFT p50 ms", ("ttft_ms", "p50"), "ttft_ms", None),
    ("TTFT p95 ms", ("ttft_ms", "p95"), "ttft_ms", "ttft_p95_ms"),
    ("ITL p50 ms", ("itl_ms", "p50"), "itl_ms", None),
    ("ITL p95 ms", ("itl_ms", "p95"), "itl_ms", "itl_p95_ms"),
    ("TPOT p50 ms", ("tpot_ms", "p50"), "tpot_ms", None),
    ("output tokens/s", ("output_tokens_per_second",), "output_tokens_per_second", None),
)


def comparison(result: dict[str, Any], load: LoadPlan) -> list[dict[str, Any]]:
    """Each measured figure beside the plan's and the objective, with measured / planned."""
    rows = []
    for label, path, planned_key, objective_key in COMPARED:
        value: Any = result
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        planned = load.planned.get(planned_key)
        ratio = round(value / planned, 2) if isinstance(value, int | float) and planned else None
        rows.append({"figure": label, "measured": value, "planned": planned,
                     "objective": load.objectives.get(objective_key) if objective_key else None, "ratio": ratio})
    return rows


LOAD_OBJECTIVES = (("ttft-p95", "ttft_p95_ms", "ttft_ms"), ("itl-p95", "itl_p95_ms", "itl_ms"))


def load_checks(target: Target, result: dict[str, Any], load: LoadPlan) -> list[Check]:
    """The load test's verdicts. One Ctrl-C cut short (`interrupted`) fails only on what more requests could not undo
    (errors, buffered responses); the objectives are `not run`: a p95 of the first requests is not the test's."""
    checks = []
    warmup = (" (all in the warm-up: none started after it completed)" if result["warmup_included"]
              else f" (+{result['warmup_requests']} warm-up)")
    summary = (f"{result['requests']} requests at concurrency {load.concurrency} over {result['window_seconds']} s"
               f"{warmup}, {result['errors']} errors")
    interrupted = bool(result.get("interrupted"))
    cut = (f"interrupted after {result.get('stopped_after_seconds')} of "
           f"{load.ramp_seconds + load.duration_seconds:g} s")
    if result["requests"] == 0 and not interrupted:
        return [Check(target.name, "load", FAIL, f"no request completed: {summary}; "
                      f"errors: {result['error_samples']}", result)]
    if result["errors"]:
        checks.append(Check(target.name, "load", FAIL, f"{summary}: {result['error_samples']}"
                            + (f" ({cut})" if interrupted else ""), result))
    elif interrupted:
        checks.append(Check(target.name, "load", NOT_RUN, f"{cut}: {summary} so far", result))
    else:
        checks.append(Check(target.name, "load", PASS, summary, result))
    if result["buffered_requests"]:
        checks.append(Check(target.name, "load-streaming", FAIL, f"{result['buffered_requests']} of "
                            f"{result['requests']} responses arrived in one burst: buffered by a proxy, so the "
                            "ITL figures are not the engine's"))
    for label, objective_key, figure in LOAD_OBJECTIVES:
        objective, measured = load.objectives.get(objective_key), result[figure]["p95"]
        if objective is None:
            continue
        if label == "itl-p95" and result["buffered_requests"]:
            # Tokens that arrived in one burst have no gaps to measure: 0 ms would pass any objective.
            checks.append(Check(target.name, label, FAIL, f"not measured: {result['buffered_requests']} response(s) "
                                "arrived buffered, so the gaps are the proxy's, not the engine's"))
            continue
        if interrupted:
            so_far = (f"{measured} ms over the first {result['requests']} requests" if measured is not None
                      else "no request completed")
            checks.append(Check(target.name, label, NOT_RUN, f"{cut}: {so_far}, not judged"))
            continue
        verdict = PASS if measured is not None and measured <= objective else FAIL
        word = "within" if verdict == PASS else "over"
        checks.append(Check(target.name, label, verdict, f"{measured} ms {word} the {objective:g} ms objective "
                            f"at concurrency {load.concurrency}"))
    return checks


# ----------------------------------------------------------------------------------------------
# Run and report


def run(settings: Settings, key: str, progress: Progress | None = None) -> dict[str, Any]:
    """Every check on every target, then the load test; the whole report as a JSON-ready dict.

    `progress` hears of each check and phase as it starts and ends, and of the load test's count (default: nothing
    is said). Ctrl-C (KeyboardInterrupt) stops the run, the load test's requests with it, and raises Interrupted
    with the report of what completed: `interrupted: true`, the verdict `interrupted`, and each check without a
    verdict of its own `not run`."""
    progress = progress or Progress()
    if not settings.targets:
        raise UsageError("settings: no target to verify")
    names = {t.name: t for t in settings.targets}
    load_target = None
    if settings.load is not None:
        load_target = names.get(settings.load_target or settings.targets[-1].name)
        if load_target is None:
            raise UsageError(f"settings: load_target {settings.load_target!r} is none of {sorted(names)}")
    for target in settings.targets:
        if target.connect_to:
            parts = urllib.parse.urlsplit(target.base_url)
            CONNECT_TO[(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))] = _address(
                target.connect_to)
    # First, through the edge: at zero replicas only the picker holds a request while the model wakes (the
    # in-cluster Service has no endpoint to connect to until then).
    wake = (None if settings.wake_seconds is None
            else next((t for t in settings.targets if t.name == "edge"), settings.targets[0]))
    planned = [(wake.name, "wake")] if wake is not None else []
    planned += [(t.name, name) for t in settings.targets
                for name in (*SMOKE_CHECKS, *(f"route {asked}" for asked, _ in settings.asked(t)))]
    if settings.load is not None and load_target is not None:
        planned += [(load_target.name, "load")] + [(load_target.name, label) for label, objective, _ in LOAD_OBJECTIVES
                                                   if objective in settings.load.objectives]
    steps = _Steps(progress, planned)
    timeout = settings.request_timeout_seconds
    # `model`, `revision` and `passed` are what `python -m stacks promote` reads of a gate (docs/verification.md).
    report: dict[str, Any] = {"model": settings.model, "revision": settings.revision, "deployed": settings.deployed,
                              "targets": {t.name: t.base_url for t in settings.targets}}
    if settings.note:
        report["note"] = settings.note
    interrupted = False
    try:
        if wake is not None and settings.wake_seconds is not None:
            wake_seconds = settings.wake_seconds
            steps.check(wake.name, "wake", f"a streamed request, its first token within the planned wake of "
                        f"{wake_seconds:g} s", lambda: check_wake(wake, settings.model, key, wake_seconds, timeout))
        for target in settings.targets:
            smoke(target, settings, key, timeout, steps)
        for target in settings.targets:
            progress.phase(f"{target.name} engine: the KV cache from /metrics")
            engine = engine_cache(target, timeout)
            tokens = (engine or {}).get("kv_cache_size_tokens")
            progress.phase(f"{target.name} engine: " + (f"{tokens:,} tokens" if tokens else
                                                        "found" if engine else "not served here"))
            if engine:
                report["engine"] = engine  # one replica's KV cache: what `plan --calibration` compares with its plan
                break
        if settings.load is not None and load_target is not None:
            steps.running = (load_target.name, "load")
            result = run_load(load_target, settings.model, key, settings.load, timeout, progress)
            steps.checks += load_checks(load_target, result, settings.load)
            steps.running = None
            report["load"] = {**result, "target": load_target.name, "comparison": comparison(result, settings.load)}
            interrupted = result["interrupted"]
    except KeyboardInterrupt:
        interrupted = True
    checks = steps.checks + (steps.not_run() if interrupted else [])
    report["checks"] = [asdict(c) for c in checks]
    # A revision's failing lines name it: the termination message pulumi-kubernetes prints is all an operator sees.
    named = f"revision {settings.revision} of {settings.model}: " if settings.revision is not None else ""
    report["failures"] = [named + c.line() for c in checks if c.verdict == FAIL]
    report["interrupted"] = interrupted
    report["verdict"] = INTERRUPTED if interrupted else FAIL if report["failures"] else PASS
    report["passed"] = report["verdict"] == PASS
    if interrupted:
        raise Interrupted(report)
    return report


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:,}"


def render_text(report: dict[str, Any]) -> str:
    interrupted = bool(report.get("interrupted"))
    lines = ["interrupted: results so far"] if interrupted else []
    lines += [Check(**c).line() for c in report["checks"]]
    load = report.get("load")
    if load:
        until = (f" until interrupted after {load['stopped_after_seconds']} s" if load.get("interrupted") else "")
        lines += ["", f"load through {load['target']}{until}: {load['requests']} requests, "
                      f"{_cell(load['prompt_tokens_mean'])} prompt / {_cell(load['output_tokens_mean'])} output "
                      "tokens each (usage means)",
                  f"{'figure':<16} {'measured':>10} {'planned':>10} {'objective':>10} {'measured/planned':>17}"]
        for row in load["comparison"]:
            lines.append(f"{row['figure']:<16} {_cell(row['measured']):>10} {_cell(row['planned']):>10} "
                         f"{_cell(row['objective']):>10} {_cell(row['ratio']):>17}")
    if report.get("engine", {}).get("kv_cache_size_tokens"):
        lines += ["", f"engine KV cache: {report['engine']['kv_cache_size_tokens']:,} tokens (vllm:cache_config_info)"]
    if report.get("note"):
        lines += ["", f"note: {report['note']}"]
    failures = len(report["failures"])
    not_run = sum(1 for c in report["checks"] if c["verdict"] == NOT_RUN)
    counts = [f"{failures} failing check(s)"] if failures else []
    counts += [f"{not_run} not run"] if not_run else []
    of = f" (revision {report['revision']} of {report['model']})" if report.get("revision") else ""
    lines += ["", f"verdict: {report['verdict'].upper()}{of}" + (f" ({', '.join(counts)})" if counts else "")]
    return "\n".join(lines) + "\n"


def read_key(key_file: str | None, key_env: str | None) -> str:
    """The API key from a file or an environment variable: never from an argument (ps would show it)."""
    if key_file:
        try:
            with open(key_file, encoding="utf-8") as handle:
                key = handle.read().strip()
        except OSError as error:
            raise UsageError(f"--api-key-file {key_file}: {error.strerror}") from None
        if not key:
            raise UsageError(f"--api-key-file {key_file}: the file is empty")
        return key
    if key_env:
        key = os.environ.get(key_env, "").strip()
        if not key:
            raise UsageError(f"--api-key-env {key_env}: the variable is unset or empty")
        return key
    raise UsageError("no API key: pass --api-key-file PATH or --api-key-env NAME")


def main(argv: list[str] | None = None) -> int:
    """The Job's entry point: `python probe.py --settings FILE --api-key-file FILE --mode gate|report`."""
    parser = argparse.ArgumentParser(prog="probe.py", description="Verify a deployed model (deploy gate).")
    parser.add_argument("--settings", required=True, help="JSON settings (targets, model, load plan)")
    parser.add_argument("--api-key-file", help="file holding the API key")
    parser.add_argument("--api-key-env", help="environment variable holding the API key")
    parser.add_argument("--mode", choices=("gate", "report"), default="gate",
                        help="gate: exit 1 on a failing check (the deploy fails); report: exit 0 and report")
    parser.add_argument("--termination-log", help="file for the failing lines (Kubernetes' termination message)")
    args = parser.parse_args(argv)
    # A Job past its activeDeadlineSeconds gets SIGTERM, then SIGKILL after its grace period: taken as Ctrl-C, the
    # load stops and the log keeps the report so far instead of ending mid-run.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    interrupted = False
    try:
        with open(args.settings, encoding="utf-8") as handle:
            settings = Settings.from_json(json.load(handle))
        # The log is what an operator reads while Pulumi waits on the Job: a line as each check and phase starts
        # and ends, on stderr, so that stdout still ends in the JSON line.
        report = run(settings, read_key(args.api_key_file, args.api_key_env), Lines(sys.stderr))
    except Interrupted as stopped:
        report, interrupted = stopped.report, True
    except (UsageError, OSError, json.JSONDecodeError) as error:
        print(f"verify: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # before the first check: nothing to report
        print("verify: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    report["mode"] = args.mode
    sys.stdout.write(render_text(report))
    # The last line is the whole report as one JSON object, for `kubectl logs job/... | tail -1`.
    print(json.dumps({"verification": report}, sort_keys=True), flush=True)
    message = (["interrupted: results so far"] if interrupted else []) + report["failures"]
    if args.termination_log and message:
        # Kubernetes keeps at most 4096 bytes of it; pulumi-kubernetes prints it when the Job fails.
        with open(args.termination_log, "w", encoding="utf-8") as handle:
            handle.write("\n".join(message)[:4000])
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAIL if report["failures"] and args.mode == "gate" else EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
