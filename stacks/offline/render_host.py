"""A clean process that forks each render of a side whose code is not the running code, so that render
does not pay for a new interpreter importing Pulumi and both providers first.

`python -m stacks render` in a new interpreter spends most of its 3-4 s of CPU importing the
program's packages (pulumi, pulumi_aws, pulumi_kubernetes: about 1,400 modules), the same files of
the same virtualenv for every side. The host is started once per process (`default_host()`), imports
those packages and nothing of the project, and forks one child per render. The child is what the
subprocess was: its working directory, environment, `sys.path` and `sys.argv` are the side's, it
runs the side's `python -m <module> ...` with none of the project's modules loaded, so every project
import resolves to the side's own files; its exit code and output come back as a subprocess's
would (`Forked` has the `communicate`, `kill` and `returncode` of a `Popen`).

Why a separate host rather than forking the caller: the caller (a pytest-xdist worker, or the diff
command after its own renders) has threads and an asyncio loop whose executor threads a fork does
not copy, and a child that used them waited forever. The host has one thread and never runs Pulumi.
Each render is a grandchild: a waiter process forks it, reports its pid and then its exit status
on a pipe of the caller's, so a render that dies by a signal still reports one.

Only on Linux (fork, and AF_UNIX SOCK_SEQPACKET to pass the caller's file descriptors); elsewhere
`available()` is False and sides render in a subprocess as before. This module imports the
standard library only: the host runs it as a script by path (`python -P`), outside any package.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import traceback
import types
from pathlib import Path

_MAX_MESSAGE = 1 << 20  # one request: the module, argv, directory, environment and modules to preload
_FDS_PER_REQUEST = 3  # stdout file, stderr file, status pipe
KILL_WAIT_SECONDS = 5.0  # for the pid line of a render being killed; a live waiter writes it at once
# What the host must not inherit: pulumi's import-time tracing setup (pulumi/runtime/_instrumentation.py)
# starts an exporter thread when these are set, and the host must have one thread when it forks.
_TRACING_ENV = ("TRACEPARENT", "OTEL_", "PULUMI_OTEL_")


class HostFailed(OSError):
    """The host or its waiter ended before the render was forked: the side is not at fault, and renders
    in a subprocess instead."""


def available() -> bool:
    return sys.platform == "linux" and hasattr(os, "fork") and hasattr(socket, "send_fds")


# --- the caller's side -----------------------------------------------------------------------------


class Forked:
    """One render forked by the host: `communicate`, `kill` and `returncode` as on a `Popen`."""

    def __init__(self, status: int, stdout: Path, stderr: Path, args: list[str], argv: list[str],
                 env: dict[str, str]) -> None:
        self._status = os.fdopen(status, "rb", buffering=0)
        self._stdout, self._stderr, self.args = stdout, stderr, args
        self.argv, self.env = argv, env  # the module's argv and the environment, for a subprocess to redo it
        self._lines: list[bytes] = [b""]
        self.pid: int | None = None  # the render's, the waiter's first line
        self.returncode: int | None = None  # its exit code, the waiter's second line

    def _read(self, timeout: float | None) -> bool:
        """Read what the waiter wrote within `timeout`; False at EOF."""
        ready, _, _ = select.select([self._status], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        chunk = self._status.read(4096)
        head, *rest = chunk.split(b"\n")
        self._lines[-1] += head
        self._lines += rest
        done = [line for line in self._lines[:-1] if line]
        if done and self.pid is None:
            self.pid = int(done[0])
        return bool(chunk)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The render's (stdout, stderr) once it ended. HostFailed when no render was ever forked (the
        host or the waiter died first, e.g. a fork refused under a pids limit)."""
        if self.returncode is None:
            while self._read(timeout):
                pass
            self._status.close()
            done = [line for line in self._lines if line]
            if not done:
                self.returncode = -int(signal.SIGKILL)
                raise HostFailed(f"the render host ended before it forked {' '.join(self.args)}")
            # No exit code: the waiter itself died after the fork; a crash, not a success.
            self.returncode = int(done[1]) if len(done) > 1 else -int(signal.SIGKILL)
        return self._stdout.read_text(errors="replace"), self._stderr.read_text(errors="replace")

    def kill(self) -> None:
        if self.returncode is not None:
            return
        # The waiter writes the pid right after its fork: wait briefly for that line (or its end); a
        # host that never forks has nothing to kill.
        with contextlib.suppress(subprocess.TimeoutExpired):
            while self.pid is None and self._read(KILL_WAIT_SECONDS):
                pass
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def host_environment() -> dict[str, str]:
    """This process's environment for a host: without PYTHONPATH (and run with -P, the host's sys.path is
    the interpreter's own: standard library, site-packages), so nothing it imports can come from a project
    directory; and without the tracing variables (_TRACING_ENV)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(_TRACING_ENV)}


class RenderHost:
    """The host process; `start(...)` forks one render in it. Close (or exit) to stop it."""

    def __init__(self, preload: list[str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = host_environment()
        # Its own session and no terminal: a Ctrl-C of the caller's group does not reach it (the caller
        # closing its end stops it), and it holds none of the caller's output pipes open; each render
        # writes to its own files.
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", __file__, str(theirs.fileno())], pass_fds=[theirs.fileno()], cwd="/",
                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._socket = ours
        self._preload = preload

    def start(self, module: str, argv: list[str], directory: Path, env: dict[str, str], scratch: Path,
              preload: list[str] | None = None) -> Forked:
        """`python -m <module> <argv>` in `directory` with `env`, forked from the host; its stdout and
        stderr go to files in `scratch`. `preload`: modules for the host to import before the fork
        (the next renders benefit too). OSError when the host is gone."""
        scratch.mkdir(parents=True, exist_ok=True)
        stdout, stderr = scratch / "stdout", scratch / "stderr"
        status_read, status_write = os.pipe()
        request = {"module": module, "argv": argv, "directory": str(directory), "env": env,
                   "preload": [*self._preload, *(preload or [])]}
        self._preload = []
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            try:
                socket.send_fds(self._socket, [json.dumps(request).encode()],
                                [out.fileno(), err.fileno(), status_write])
            except BaseException:
                os.close(status_read)
                raise
            finally:
                os.close(status_write)
        return Forked(status_read, stdout, stderr, [sys.executable, "-m", module, *argv], argv, env)

    def close(self) -> None:
        self._socket.close()  # the host reads EOF, waits for its renders and exits
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # Its own session, so its own process group: its waiters and renders go with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def loaded_modules(top_level: tuple[str, ...]) -> list[str]:
    """The modules this process has imported under those top-level names, in the order it first
    imported them, for the host to import the same way. A module still waiting behind a lazy import
    (pulumi's packages declare their submodules so) was never run here and is left out."""
    return [name for name, module in list(sys.modules.items())
            if name.split(".", 1)[0] in top_level and not _is_lazy(module)]


def _is_lazy(module: object) -> bool:
    # importlib.util.LazyLoader's module type, and pulumi's copy of it (pulumi/_utils.py), both named so.
    return type(module).__name__ == "_LazyModule" and isinstance(module, types.ModuleType)


_default: RenderHost | None = None


def default_host(preload: tuple[str, ...]) -> RenderHost:
    """This process's host, started on first use (importing `preload`) and stopped at exit."""
    global _default
    if _default is None:
        import atexit

        _default = RenderHost(list(preload))
        atexit.register(_default.close)
    return _default


def forget_default() -> None:
    """Stop using this process's host (it failed): the next default_host() starts a new one."""
    global _default
    host, _default = _default, None
    if host is not None:
        with contextlib.suppress(OSError):
            host.close()


# --- the host --------------------------------------------------------------------------------------


def _run_render(request: dict, stdout: int, stderr: int) -> None:
    """In the forked child: become `python -m <module> <argv>` run in the side's directory. Never returns."""
    code = 1
    try:
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.close(stdout)
        os.close(stderr)
        directory = request["directory"]
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        # What `python -m` puts first (the working directory), then PYTHONPATH's entries.
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [directory, *extra]
        sys.argv = ["-m", *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:  # as the interpreter treats it
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the traceback a new interpreter would print
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _wait_for(request: dict, fds: list[int]) -> None:
    """In the waiter: fork the render, write its pid and then its exit code on the status pipe."""
    stdout, stderr, status = fds
    try:
        pid = os.fork()
    except OSError:  # no pid line: the caller renders this side in a subprocess (HostFailed)
        os._exit(1)
    if pid == 0:
        os.close(status)
        _run_render(request, stdout, stderr)
    os.close(stdout)
    os.close(stderr)
    os.write(status, f"{pid}\n".encode())
    _, wait_status = os.waitpid(pid, 0)
    os.write(status, f"{os.waitstatus_to_exitcode(wait_status)}\n".encode())
    os._exit(0)


def _run_lazy(name: str) -> None:
    """Run a module (and first its packages) that a lazy import declared but nothing has used yet."""
    parent = name.rpartition(".")[0]
    if parent:
        _run_lazy(parent)
    module = sys.modules.get(name)
    if module is not None and _is_lazy(module):
        # Looking up any attribute but the introspection ones (__name__, __spec__, ...) runs it.
        getattr(module, "_run_by_the_render_host", None)


def _preload(modules: list[str]) -> None:
    """Import `modules` as the caller did, in its order. Each package runs before its submodules are
    imported by name: importing `pkg.Name` into a package that `pulumi` left lazy would bind the
    module over the class `pkg/__init__.py` exports under the same name (pulumi_kubernetes's
    `apiextensions.CustomResource`), where the package's own `from .Name import *` binds the class."""
    for name in modules:
        # A module that fails here fails the same way in the render, which reports it.
        with contextlib.suppress(Exception):
            _run_lazy(name.rpartition(".")[0])
            if name in sys.modules:
                _run_lazy(name)
            else:
                importlib.import_module(name)


def _reap(block: bool) -> None:
    """Wait for finished waiters (every one when `block`): so their CPU, and their renders', is
    counted in the host's and then the caller's resource usage, as a subprocess's would be."""
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(channel: socket.socket) -> None:
    """The host's loop: one request per message, until the caller closes its end."""
    while True:
        message, fds, _, _ = socket.recv_fds(channel, _MAX_MESSAGE, _FDS_PER_REQUEST)
        _reap(block=not message)
        if not message:
            return
        request = json.loads(message)
        _preload(request["preload"])
        if len(fds) != _FDS_PER_REQUEST:
            for fd in fds:
                os.close(fd)
            continue
        try:
            if os.fork() == 0:
                channel.close()
                _wait_for(request, fds)
        except OSError:  # fork refused: closing the status pipe unforked tells the caller (HostFailed)
            pass
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
    # Every render is reaped and the host writes nothing: skip the interpreter's teardown of the ~1,400
    # modules it imported (about 0.8 s, which the caller's close() and so every diff's exit waited for).
    os._exit(0)
