"""One render host for the whole run instead of one per xdist worker.

`render_host.default_host()` starts a host per process, and a host spends about 2.4 s of CPU importing
the program's packages before its first fork (stacks/offline/render_host.py). The tests that fork
renders from it (tests/stacks/offline: the diff of edited code, the golden forked render) are spread
over both workers by work stealing, so nearly every run started two hosts and imported the packages
twice.

Here the first worker that asks for a host starts this file as a script (`python -P`, standard library
only, as the host itself), which imports what that worker had imported of the program's packages, the
way a host does, and then listens on an abstract Unix socket named after the run's temporary root. Each
worker that connects gets a host of its own, forked from that one after the imports: the host's own loop
(`render_host.serve`) on the connection, so each render is forked exactly as from a host the worker
started itself. The listener ends when the worker that started it exits (its stdin is that worker's
pipe), after the hosts it forked, each of which ends when its worker closes the connection.

If the listener cannot start or be reached, the worker starts its own host, as without this module.
Only under xdist (tests/conftest.py): one process has nothing to share.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

START_TIMEOUT_SECONDS = 120.0  # the listener's imports take about 2.4 s of CPU; a loaded machine more
# How long the starting worker's exit waits for the other workers' hosts to end (they end as those workers
# exit, which the xdist controller waits for anyway): the run's longest stretch of tests, with room.
STOP_TIMEOUT_SECONDS = 600.0
_POLL_SECONDS = 0.02
_READY, _FAILED, _PRELOAD, _STDERR, _STARTED = "ready", "failed", "preload.json", "stderr", "started"
CLOSE_WAIT_SECONDS = 10.0  # as RenderHost.close(): a host that has not ended by then is killed
_PROJECT = Path(__file__).resolve().parents[2]


def address(directory: Path, token: str) -> bytes:
    """The listener's abstract socket name (no file, no path-length limit): its run's directory and a token
    of its own, so a listener left by an earlier run in a reused directory is never reached."""
    return b"\0llm-serving-render-host-" + hashlib.sha256(f"{directory}\0{token}".encode()).hexdigest()[:32].encode()


# --- the workers' side ------------------------------------------------------------------------------


def connect(directory: Path, preload: list[str]) -> tuple[socket.socket, int, int] | None:
    """A connection to the run's listener in `directory`, started here (importing `preload`) if no worker
    started it, with the pid and a pidfd of the host it forked for it; None when the listener failed to
    start, did not answer within START_TIMEOUT_SECONDS or has ended."""
    from tests.support import shared_files

    directory.mkdir(parents=True, exist_ok=True)
    with shared_files.locked(directory / "lock"):
        if not (directory / _STARTED).is_file():
            _start(directory, preload)
    try:
        token = str(json.loads((directory / _STARTED).read_text())["token"])
    except (OSError, ValueError, KeyError, TypeError):  # not one this module wrote
        return None
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not (directory / _READY).is_file():
        if (directory / _FAILED).is_file() or time.monotonic() > deadline:
            return None
        time.sleep(_POLL_SECONDS)
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        channel.connect(address(directory, token))
        channel.settimeout(START_TIMEOUT_SECONDS)
        # The host's first message: its pid, and a pidfd of itself (no window for the pid to be reused).
        pid, fds, _, _ = socket.recv_fds(channel, 64, 1)
        channel.settimeout(None)
        (pidfd,) = fds
        return channel, int(pid), pidfd
    except (OSError, ValueError):  # the listener has ended (with the worker that started it) or refused
        channel.close()
        return None


# The listeners this process started, by directory: each lives while its Popen's stdin pipe is open here.
_listeners: dict[Path, subprocess.Popen[bytes]] = {}


def _start(directory: Path, preload: list[str]) -> None:
    from stacks.offline import render_host
    from tests.support import shared_files

    shared_files.write_whole(directory / _PRELOAD, json.dumps(preload).encode())
    token = secrets.token_hex(8)
    # As RenderHost starts a host: its environment and -P, its own session, no terminal. Its stdin is this
    # worker's pipe, so it ends with this worker.
    with open(directory / _STDERR, "wb") as stderr:
        listener = subprocess.Popen([sys.executable, "-P", __file__, str(directory), token], cwd="/",
                                    env=render_host.host_environment(),
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                                    start_new_session=True)
    _listeners[directory] = listener
    shared_files.write_whole(directory / _STARTED, json.dumps({"pid": listener.pid, "token": token}).encode())
    import atexit

    atexit.register(stop, directory)


def stop(directory: Path) -> int | None:
    """End the listener this process started in `directory`, as at this process's exit: it stops
    accepting, waits for the hosts it forked (each ends when its worker closes its connection) and
    exits, so no process of it outlives the run and its CPU is counted in the run's. Its exit code;
    None when this process started none there (or stopped it already)."""
    listener = _listeners.pop(directory, None)
    if listener is None:
        return None
    listener.stdin.close()
    try:
        return listener.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:  # a host whose worker never closed: its own session, so its group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(listener.pid, signal.SIGKILL)
        return listener.wait()


def host_on(connection: tuple[socket.socket, int, int]):  # noqa: ANN201 - a render_host.RenderHost
    """A RenderHost whose host is the one the listener forked for `connection` (from connect())."""
    from stacks.offline import render_host

    channel, pid, pidfd = connection

    class _Forked(render_host.RenderHost):
        """Not this process's child, so closed as RenderHost.close() closes its own: the connection's end
        (it reaps its renders and exits), then, after CLOSE_WAIT_SECONDS, a kill of its process group, its
        renders with it (a host stuck before a fork holds that render's status pipe open until it ends)."""

        def __init__(self) -> None:  # RenderHost's, without the spawn
            self._socket, self._preload, self.process = channel, [], None
            self._pidfd: int | None = pidfd

        def close(self) -> None:
            self._socket.close()
            if self._pidfd is None:  # closed already (forget_default, then the exit handler)
                return
            ending = select.poll()
            ending.register(self._pidfd, select.POLLIN)
            if not ending.poll(CLOSE_WAIT_SECONDS * 1000):
                # Still running, so not reaped: its pid is still its process group's (its own, _fork_host).
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = None

    return _Forked()


def shared_default_host(real_default_host, directory: Path):  # noqa: ANN001, ANN201 - render_host's types
    """`render_host.default_host` for this worker: its host forked from the run's listener, else its own."""
    from stacks.offline import render_host

    def default_host(preload: tuple[str, ...]) -> render_host.RenderHost:
        if render_host._default is None:  # noqa: SLF001 - forget_default() clears it when a host fails
            connection = connect(directory, render_host.loaded_modules(preload))
            if connection is None:
                return real_default_host(preload)
            import atexit

            render_host._default = host_on(connection)  # noqa: SLF001
            atexit.register(render_host._default.close)  # noqa: SLF001
        return render_host._default  # noqa: SLF001

    return default_host


# --- the listener -----------------------------------------------------------------------------------


def _load(name: str, path: Path):  # noqa: ANN202 - a module of the project's, loaded by path outside any package
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def listen(directory: Path, token: str, shared_files) -> None:  # noqa: ANN001 - tests/support/shared_files.py
    """Import the preload the way a host does, then fork a host per connection until stdin closes."""
    render_host = _load("render_host", _PROJECT / "stacks" / "offline" / "render_host.py")  # standard library only
    render_host._preload(json.loads((directory / _PRELOAD).read_text()))  # noqa: SLF001
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address(directory, token))
    listener.listen()
    shared_files.write_whole(directory / _READY, str(os.getpid()).encode())
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
        render_host._reap(block=False)  # noqa: SLF001 - the host's own reaping, of the hosts here
        if listener in ready:
            _fork_host(render_host, listener, *listener.accept())
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            # The worker that started it is exiting. A worker whose connect() returned has its connection
            # queued here even if not accepted yet: it gets its host too. Then no new hosts, and the
            # forked ones end with their workers.
            listener.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while True:
                    _fork_host(render_host, listener, *listener.accept())
            listener.close()
            render_host._reap(block=True)  # noqa: SLF001
            return


def _fork_host(render_host, listener: socket.socket, channel: socket.socket, _: object) -> None:  # noqa: ANN001
    """A host for `channel`: the host's own loop, in a fork of this process after its imports, with
    RenderHost's standard streams (/dev/null: no render reads the starting worker's pipe) and a process
    group of its own, which its renders join (so closing its worker's end can stop them with it)."""
    try:
        pid = os.fork()
    except OSError:  # no host for this worker, which then starts its own; the listener goes on
        channel.close()
        return
    if pid == 0:
        code = 1
        try:
            listener.close()
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDWR)
            for stream in (0, 1, 2):
                os.dup2(null, stream)
            os.close(null)
            channel.setblocking(True)
            itself = os.pidfd_open(os.getpid())
            socket.send_fds(channel, [str(os.getpid()).encode()], [itself])
            os.close(itself)
            render_host.serve(channel)
            code = 0
        finally:  # never the listener's own handling: a worker gone before its host started is not a failure
            os._exit(code)
    channel.close()


if __name__ == "__main__":
    run_directory = Path(sys.argv[1])
    files = _load("shared_files", _PROJECT / "tests" / "support" / "shared_files.py")  # standard library only
    try:
        listen(run_directory, sys.argv[2], files)
    except BaseException:  # connect() stops waiting at once and the worker starts its own host
        files.write_whole(run_directory / _FAILED, traceback.format_exc().encode())
        raise
    os._exit(0)  # as the host: skip the teardown of the imported packages
