"""The drain barrier holds only while its own Deployment is being deleted (llm_serving/gpu/barrier_prestop.py): the
preStop command prod's render carries, run against a local HTTPS server on 127.0.0.1 that plays the API server, with
a certificate for that address from a CA of its own (tests/fixtures/tls/) and a service-account folder as the kubelet
mounts it. The wait is shortened by argument; a wait far beyond the guard timeout shows a run that returns did not
hold, and a run still going after its decision line shows one that holds."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llm_serving.gpu import barrier_prestop, drain
from tests.support.local_http import serving

TLS = Path(__file__).resolve().parents[2] / "fixtures" / "tls"
TOKEN = "barrier-token-of-the-test"
NAMESPACE = "llm-serving"
GUARD_SECONDS = 60  # only stops a hung test; no run below is expected to come near it
LONG_WAIT = 3600  # far beyond the guard: a run that returns did not wait it out


def pre_stop(result) -> list[str]:
    (barrier,) = [m for m in result.manifests
                  if m["kind"] == "Deployment" and m["metadata"]["name"].startswith("node-drain-barrier-")]
    (container,) = barrier["spec"]["template"]["spec"]["containers"]
    return container["lifecycle"]["preStop"]["exec"]["command"]


@dataclass
class Answer:
    status: int
    body: dict = field(default_factory=dict)


@dataclass
class ApiServer:
    """Answers GETs with `answers` in turn (the last one from then on) and records each request's path and
    Authorization header; `seen` is set after each answer is written."""

    answers: list[Answer]
    requests: list[tuple[str, str]] = field(default_factory=list)
    seen: threading.Condition = field(default_factory=threading.Condition)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with api.seen:
                    answer = api.answers[min(len(api.requests), len(api.answers) - 1)]
                body = json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                with api.seen:
                    api.requests.append((self.path, self.headers.get("Authorization", "")))
                    api.seen.notify_all()

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def wait_for(self, count: int) -> None:
        with self.seen:
            assert self.seen.wait_for(lambda: len(self.requests) >= count, timeout=GUARD_SECONDS)


@pytest.fixture
def account(tmp_path: Path) -> Path:
    """The service-account folder the kubelet mounts: token, the cluster's CA, the pod's namespace."""
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text(TOKEN)
    shutil.copy(TLS / "apiserver-ca.pem", folder / "ca.crt")
    (folder / "namespace").write_text(NAMESPACE)
    return folder


@pytest.fixture
def command(rendered) -> list[str]:
    return pre_stop(rendered["prod"])


def _args(command: list[str], wait: float, account: Path) -> list[str]:
    python, flag, script, _, deployment = command
    assert (python, flag) == ("python", "-c")
    # The container's python is this interpreter here; only the wait is shortened, plus the mounted folder's
    # place and a quicker retry.
    return [sys.executable, "-c", script, f"{wait:g}", deployment, "--service-account-dir", str(account),
            "--retry-seconds", "0.05"]


def _env(port: int) -> dict[str, str]:
    return {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}


@pytest.fixture
def api() -> Iterator[tuple[ApiServer, int]]:
    state = ApiServer([])
    server = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(TLS / "apiserver.pem"), str(TLS / "apiserver.key"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server):
        yield state, server.server_address[1]


def run(command: list[str], wait: float, account: Path, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_args(command, wait, account), env=_env(port), capture_output=True, text=True,
                          timeout=GUARD_SECONDS)


def start(command: list[str], wait: float, account: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(_args(command, wait, account), env=_env(port), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def still_holding(process: subprocess.Popen[str]) -> tuple[str, bool]:
    """The first line it said, and whether it was still running after saying it; then it is stopped."""
    try:
        line = process.stdout.readline() if process.stdout else ""
        return line, process.poll() is None
    finally:
        process.kill()
        process.communicate(timeout=GUARD_SECONDS)


def deployment(name: str, deleting: bool) -> dict:
    metadata = {"name": name, "namespace": NAMESPACE, "uid": "5c2f"}
    if deleting:
        metadata |= {"deletionTimestamp": "2026-12-06T10:00:00Z", "finalizers": ["foregroundDeletion"]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata}


def test_the_pre_stop_is_the_scripts_file_with_the_longest_grace_period_and_its_own_deployment(rendered, command):
    manifest = [m for m in rendered["prod"].manifests if m["kind"] == "Deployment"
                and m["metadata"]["name"] == command[4]]
    assert len(manifest) == 1  # it reads the very Deployment it belongs to
    assert command[2] == Path(barrier_prestop.__file__).read_text(encoding="utf-8") == drain.PRE_STOP_SOURCE
    vllm = rendered["prod"].manifest("Deployment", "llama-70b")["spec"]["template"]["spec"]
    assert int(command[3]) == vllm["terminationGracePeriodSeconds"]


def test_an_evicted_barrier_exits_at_once(command, account, api):
    # A CPU node's drain evicts the pod; its Deployment is not being deleted, so nothing is held back.
    server, port = api
    server.answers = [Answer(200, deployment(command[4], deleting=False))]
    done = run(command, LONG_WAIT, account, port)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"drain barrier: Deployment {NAMESPACE}/{command[4]} is not being deleted (an eviction, a "
                           "drain or a rollout): exiting at once\n")
    # One read of exactly its own Deployment, with the mounted token.
    assert server.requests == [(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{command[4]}", f"Bearer {TOKEN}")]


def test_a_barrier_whose_deployment_is_being_deleted_holds_for_the_wait(command, account, api):
    server, port = api
    server.answers = [Answer(200, deployment(command[4], deleting=True))]
    line, holding = still_holding(start(command, LONG_WAIT, account, port))
    assert line.startswith(f"drain barrier: Deployment {NAMESPACE}/{command[4]} is being deleted (deletionTimestamp "
                           "2026-12-06T10:00:00Z): holding ")
    assert holding
    # And for no longer than the wait.
    done = run(command, 0.2, account, port)
    assert done.returncode == 0 and "is being deleted" in done.stdout


def test_a_deployment_already_gone_holds_nothing(command, account, api):
    server, port = api
    server.answers = [Answer(404, {"kind": "Status", "reason": "NotFound", "code": 404})]
    done = run(command, LONG_WAIT, account, port)
    assert done.returncode == 0
    assert done.stdout == f"drain barrier: Deployment {NAMESPACE}/{command[4]} is gone: exiting at once\n"


def test_a_forbidden_read_holds_until_the_wait_is_over(command, account, api):
    # Without its Role the barrier cannot tell a drain from a node update: it keeps asking and holds.
    server, port = api
    server.answers = [Answer(403, {"kind": "Status", "reason": "Forbidden", "code": 403})]
    process = start(command, LONG_WAIT, account, port)
    server.wait_for(3)  # it retried, and is still running
    line, holding = still_holding(process)
    assert line == (f"drain barrier: cannot read Deployment {command[4]}: HTTP Error 403: Forbidden; retrying, "
                    f"holding at most {LONG_WAIT} s more\n")
    assert holding
    done = run(command, 0.3, account, port)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1] == (f"drain barrier: cannot read Deployment {command[4]}: HTTP Error 403: "
                                            "Forbidden; held the whole 0.3 s")


def test_a_read_that_succeeds_after_failures_decides(command, account, api):
    server, port = api
    server.answers = [Answer(403, {"code": 403}), Answer(503, {"code": 503}),
                      Answer(200, deployment(command[4], deleting=False))]
    done = run(command, LONG_WAIT, account, port)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].endswith("is not being deleted (an eviction, a drain or a rollout): exiting "
                                                 "at once")
    assert len(server.requests) == 3


def test_an_unreachable_api_server_holds_until_the_wait_is_over(command, account):
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there: connection refused
    line, holding = still_holding(start(command, LONG_WAIT, account, port))
    assert line.startswith(f"drain barrier: cannot read Deployment {command[4]}: <urlopen error [Errno 111] "
                           "Connection refused>; retrying")
    assert holding
    done = run(command, 0.3, account, port)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].endswith("held the whole 0.3 s")


def test_an_api_server_the_cluster_ca_did_not_sign_is_not_believed(command, account, api):
    # A certificate the mounted CA does not vouch for is a failed read: the barrier holds rather than trust it.
    server, port = api
    server.answers = [Answer(200, deployment(command[4], deleting=False))]
    shutil.copy(TLS / "ca.pem", account / "ca.crt")  # the edge tests' CA, not the API server's
    done = run(command, 0.3, account, port)
    assert done.returncode == 0
    assert "CERTIFICATE_VERIFY_FAILED" in done.stdout and done.stdout.splitlines()[-1].endswith("held the whole 0.3 s")
    assert server.requests == []
