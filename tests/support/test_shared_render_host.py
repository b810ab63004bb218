"""One render host for the run (tests/support/shared_render_host.py): every connection's host is a fork
of one listener, after its imports; a listener that is gone or never started leaves a worker its own."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from stacks.offline import render_host
from tests.support import shared_render_host

pytestmark = pytest.mark.skipif(not render_host.available(), reason="the render host needs Linux (fork, SEQPACKET)")

# A side that reports its ancestry (render <- waiter <- host <- listener) and what it found imported.
LINEAGE = textwrap.dedent("""\
    import json, os, sys
    def parent(pid):
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    waiter = os.getppid()
    host = parent(waiter)
    print(json.dumps({"host": host, "listener": parent(host), "preloaded": "colorsys" in sys.modules,
                      "stdin": os.readlink("/proc/self/fd/0")}))
""")


# A side that prints its pid and then waits until it is killed.
WAITING = "import os, threading\nprint(os.getpid(), flush=True)\nthreading.Event().wait()\n"


@pytest.fixture
def side(tmp_path: Path) -> Path:
    (tmp_path / "side").mkdir()
    (tmp_path / "side" / "lineage.py").write_text(LINEAGE)
    (tmp_path / "side" / "waiting.py").write_text(WAITING)
    return tmp_path / "side"


@pytest.fixture
def run_dir(tmp_path: Path):
    directory = tmp_path / "render-host"
    yield directory
    if directory in shared_render_host._listeners:
        shared_render_host.stop(directory)


def _lineage(host: render_host.RenderHost, side: Path, scratch: Path) -> dict:
    forked = host.start("lineage", [], side, {"PATH": os.environ["PATH"]}, scratch)
    out, err = forked.communicate(timeout=60)
    assert forked.returncode == 0, err
    return json.loads(out)


def test_two_workers_get_two_hosts_forked_from_one_listener_after_its_imports(run_dir, side, tmp_path):
    # "colorsys": a standard-library module nothing here imports, so only the preload puts it there.
    assert "colorsys" not in sys.modules
    first = shared_render_host.host_on(shared_render_host.connect(run_dir, ["colorsys"]))
    second = shared_render_host.host_on(shared_render_host.connect(run_dir, ["an-other-workers-list"]))
    try:
        seen = [_lineage(first, side, tmp_path / "a"), _lineage(second, side, tmp_path / "b")]
    finally:
        first.close()
        second.close()
    listener = int((run_dir / "ready").read_text())
    assert json.loads((run_dir / "started").read_text())["pid"] == listener  # started once, by the first
    assert [s["listener"] for s in seen] == [listener, listener]
    assert seen[0]["host"] != seen[1]["host"]  # one host per connection
    assert [s["preloaded"] for s in seen] == [True, True]
    assert [s["stdin"] for s in seen] == ["/dev/null", "/dev/null"]  # as from RenderHost, not the worker's pipe


def test_the_listener_ends_with_the_worker_that_started_it_and_then_nobody_connects(run_dir):
    shared_render_host.host_on(shared_render_host.connect(run_dir, [])).close()
    assert shared_render_host.stop(run_dir) == 0  # its stdin closed, as at the worker's exit
    assert shared_render_host.connect(run_dir, []) is None
    assert shared_render_host.stop(run_dir) is None  # once: the exit handler finds nothing left to stop


def test_the_listener_waits_for_the_host_of_a_worker_still_connected(run_dir):
    host = shared_render_host.host_on(shared_render_host.connect(run_dir, []))
    stopping = threading.Thread(target=lambda: codes.append(shared_render_host.stop(run_dir)))
    codes: list[int | None] = []
    stopping.start()
    stopping.join(timeout=0.5)
    assert stopping.is_alive() and codes == []  # the other worker's host still serves it
    host.close()  # that worker exits
    stopping.join(timeout=60)
    assert codes == [0]


def test_a_worker_whose_listener_failed_to_start_starts_its_own_host(run_dir, monkeypatch):
    monkeypatch.setattr(shared_render_host.secrets, "token_hex", lambda _: "fixed")
    taken = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    taken.bind(shared_render_host.address(run_dir, "fixed"))  # so the listener's bind fails
    own: list[tuple[str, ...]] = []
    monkeypatch.setattr(render_host, "_default", None)
    default_host = shared_render_host.shared_default_host(lambda preload: own.append(preload) or "own", run_dir)
    try:
        assert default_host(("json",)) == "own"
    finally:
        taken.close()
    assert own == [("json",)]
    assert "OSError: [Errno 98] Address already in use" in (run_dir / "failed").read_text()
    assert render_host._default is None


def test_closing_a_host_that_does_not_end_kills_it(run_dir, side, tmp_path, monkeypatch):
    # As RenderHost.close(): a host stuck before a fork holds that render's status pipe open until it ends.
    host = shared_render_host.host_on(shared_render_host.connect(run_dir, []))
    pid = _lineage(host, side, tmp_path / "a")["host"]
    os.kill(pid, signal.SIGSTOP)
    monkeypatch.setattr(shared_render_host, "CLOSE_WAIT_SECONDS", 0.1)
    host.close()
    deadline = time.monotonic() + 60
    while _state(pid) not in ("Z", None):  # killed: a zombie until the listener reaps it, then gone
        assert time.monotonic() < deadline, f"host {pid} still {_state(pid)}"
        time.sleep(0.05)
    host.close()  # a second close (forget_default, then the exit handler) does nothing


def test_closing_a_host_that_does_not_end_kills_its_renders_too(run_dir, side, tmp_path, monkeypatch):
    host = shared_render_host.host_on(shared_render_host.connect(run_dir, []))
    forked = host.start("waiting", [], side, {"PATH": os.environ["PATH"]}, tmp_path / "w")  # kept: its pipe
    deadline = time.monotonic() + 60
    while not (tmp_path / "w" / "stdout").read_text().strip():
        assert time.monotonic() < deadline, "the render never started"
        time.sleep(0.05)
    render = int((tmp_path / "w" / "stdout").read_text())
    monkeypatch.setattr(shared_render_host, "CLOSE_WAIT_SECONDS", 0.1)
    host.close()  # the host waits for the render, which never ends: both go
    while _state(render) not in ("Z", None):
        assert time.monotonic() < deadline, f"render {render} still {_state(render)}"
        time.sleep(0.05)
    forked.communicate(timeout=60)
    assert forked.returncode == -signal.SIGKILL


def test_a_worker_gone_before_its_host_started_leaves_the_listener_serving(run_dir, side, tmp_path):
    shared_render_host.host_on(shared_render_host.connect(run_dir, [])).close()
    token = json.loads((run_dir / "started").read_text())["token"]
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    gone.connect(shared_render_host.address(run_dir, token))
    gone.close()  # before its host could send its pid, as a worker that died right after connecting
    host = shared_render_host.host_on(shared_render_host.connect(run_dir, []))
    try:
        assert _lineage(host, side, tmp_path / "a")["listener"] == int((run_dir / "ready").read_text())
    finally:
        host.close()
    assert not (run_dir / "failed").exists()


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_connected_worker_keeps_its_host_until_forget_default_drops_it(run_dir, monkeypatch):
    monkeypatch.setattr(render_host, "_default", None)
    default_host = shared_render_host.shared_default_host(lambda preload: pytest.fail("started its own"), run_dir)
    host = default_host(("json",))
    assert default_host(("json",)) is host
    render_host.forget_default()  # as sides.py does when a host fails: the next call connects again
    again = default_host(("json",))
    try:
        assert again is not host and host._socket.fileno() == -1
    finally:
        again.close()
