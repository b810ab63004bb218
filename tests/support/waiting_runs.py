"""Runs that spend their time waiting on local servers, in a process of their own from the session's start.

The probe's scenarios (tests/support/probe_runs.py) compute almost nothing: each waits 0.15-1.9 s on
its server's sleeps. Run by the module that reads them, they left the core of the xdist worker running
that module idle while it waited: about 2.7 s of core per run on the 2-core machine (sampled from
/proc/stat). verify's two load runs (tests/support/verify_runs.py) left about 1.7 s of core idle the
same way; here they cost the process the import of the verify command, the config schema and the
planners on top of the probe's (0.43 s of CPU).

So under xdist the first worker to start its session starts one process for every group whose tests
the session selected (`python -m tests.support.waiting_runs <directory> <group>=<module>...`), and those runs
wait while both workers run other tests. The process writes each run's outcome to the run's
temporary root (shared by the workers, as the renders are, tests/support/shared_renders.py), and a
test reads its run's outcome from there, waiting for it if it is not written yet. Each run still has
its own server, port and threads, as it had in a module's thread pool. Without xdist (one process,
nothing else to overlap), a module runs its group in threads at its first test, as before.

A run's outcome is its return value or the traceback it raised; a test that reads a failed run fails
with that traceback. If the process itself fails, every test reading it fails with its traceback, or,
when it could not write one (killed, or failing before its handler), with its exit status and stderr,
which the worker that started it writes as soon as it ends.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import json
import os
import pickle
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from tests.support import shared_files

PROJECT_DIR = Path(__file__).resolve().parents[2]
# group: (the test module whose tests read it, the module whose jobs() returns its runs)
GROUPS = {
    "probe": ("tests/components/verification/test_probe.py", "tests.support.probe_runs"),
    "verify": ("tests/stacks/cli/test_verify.py", "tests.support.verify_runs"),
}
RESULT_TIMEOUT_SECONDS = 120.0
_POLL_SECONDS = 0.01
_STARTED, _FAILED, _STDERR = "started.json", "runner.failed", "runner.stderr"

_shared: Path | None = None  # this session's directory of outcomes, when a process runs the groups
_groups: dict[str, str] = {}  # the groups it runs: group -> the module of their jobs()


class Outcome(Protocol):
    def result(self, timeout: float | None = None) -> Any: ...


class Runs(Protocol):
    def __getitem__(self, name: str) -> Outcome: ...


def _jobs(module: str, scratch: Path) -> dict[str, Callable[[], Any]]:
    return importlib.import_module(module).jobs(scratch)


def _file(directory: Path, group: str, name: str) -> Path:
    return directory / f"{group}.{name}.pickle"


def _names(directory: Path, group: str) -> Path:
    return directory / f"{group}.names.json"


def selected_groups(nodeids: Iterable[str]) -> dict[str, str]:
    """The groups (group -> the module of its jobs()) whose test module has a test among `nodeids`."""
    modules = {nodeid.split("::", 1)[0] for nodeid in nodeids}
    return {group: jobs for group, (module, jobs) in GROUPS.items() if module in modules}


@contextlib.contextmanager
def started(directory: Path, groups: dict[str, str]) -> Iterator[None]:
    """Within an xdist worker's session: the groups run in one process, started by the first worker
    here (the others find it started); the one that started it waits for it at the end."""
    global _shared, _groups
    directory.mkdir(parents=True, exist_ok=True)
    process, before = None, (_shared, _groups)
    with shared_files.locked(directory / "lock"):
        marker = directory / _STARTED
        if not marker.is_file() and groups:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
            env["PYTHONPATH"] = str(PROJECT_DIR)
            command = [sys.executable, "-m", __name__, str(directory), *(f"{g}={m}" for g, m in sorted(groups.items()))]
            with open(directory / _STDERR, "wb") as stderr:
                process = subprocess.Popen(command, cwd=PROJECT_DIR, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=stderr)
            marker.write_text(json.dumps({"pid": process.pid, "groups": groups}))
            threading.Thread(target=_watch, args=(process, directory), daemon=True).start()
        if marker.is_file():
            _shared, _groups = directory, json.loads(marker.read_text())["groups"]
    try:
        yield
    finally:
        _shared, _groups = before  # a test of this module inside a session leaves the session's as it was
        if process is not None:
            try:
                process.wait(timeout=RESULT_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _watch(process: subprocess.Popen[bytes], directory: Path) -> None:
    """A process that ends badly without saying why (killed, or failing before its own handler) fails its
    readers at once, in every worker, rather than each after RESULT_TIMEOUT_SECONDS."""
    code = process.wait()
    if code != 0 and not (directory / _FAILED).is_file():
        stderr = (directory / _STDERR).read_text(errors="replace")[-2000:]
        shared_files.write_whole(directory / _FAILED, f"the process exited with {code}; its stderr:\n{stderr}".encode())


class _Written:
    """A run's outcome as the process writes it: `result()` waits for the file."""

    def __init__(self, directory: Path, group: str, name: str) -> None:
        self._directory, self._group, self._name = directory, group, name

    def result(self, timeout: float | None = None) -> Any:
        path = _file(self._directory, self._group, self._name)
        timeout = RESULT_TIMEOUT_SECONDS if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while not path.is_file():
            names = _names(self._directory, self._group)
            if names.is_file() and self._name not in json.loads(names.read_text()):
                raise LookupError(f"no run {self._name!r} in group {self._group!r}: {names.read_text()}")
            failed = self._directory / _FAILED
            if failed.is_file():
                raise RuntimeError(f"the waiting-runs process failed before {self._group}.{self._name}:\n"
                                   f"{failed.read_text()}")
            if time.monotonic() > deadline:
                started_ = (self._directory / _STARTED).read_text()
                stderr = (self._directory / _STDERR).read_text(errors="replace")[-2000:]
                raise TimeoutError(f"no outcome of {self._group}.{self._name} from the waiting-runs process "
                                   f"{started_} after {timeout} s; its stderr:\n{stderr}")
            time.sleep(_POLL_SECONDS)
        kind, value = pickle.loads(path.read_bytes())
        if kind == "error":
            raise RuntimeError(f"{self._group}.{self._name} raised in the waiting-runs process:\n{value}")
        return value


class _WrittenRuns:
    def __init__(self, directory: Path, group: str) -> None:
        self._directory, self._group = directory, group

    def __getitem__(self, name: str) -> Outcome:
        return _Written(self._directory, self._group, name)


@contextlib.contextmanager
def outcomes(group: str, scratch: Path) -> Iterator[Runs]:
    """Each run of `group` (of GROUPS) by name: from the session's process when it runs the group,
    else run here, all at once in threads (`scratch`: a directory for the runs' files)."""
    if _shared is not None and group in _groups:
        yield _WrittenRuns(_shared, group)
        return
    jobs = _jobs(GROUPS[group][1], scratch)
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        yield {name: pool.submit(job) for name, job in jobs.items()}


def _outcome(future: concurrent.futures.Future[Any]) -> tuple[str, Any]:
    error = future.exception()
    if error is None:
        return "ok", future.result()
    return "error", "".join(traceback.format_exception(error))


def _write(directory: Path, group: str, name: str, outcome: tuple[str, Any]) -> None:
    shared_files.write_whole(_file(directory, group, name), pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))


def main(argv: list[str]) -> int:
    """`<directory> <group>=<module>...`: every run of every group at once; each outcome as it ends."""
    directory, groups = Path(argv[0]), dict(arg.split("=", 1) for arg in argv[1:])
    try:
        scratch = directory / "scratch"
        scratch.mkdir(exist_ok=True)
        jobs = {}
        for group, module in groups.items():
            found = _jobs(module, scratch)
            shared_files.write_whole(_names(directory, group), json.dumps(sorted(found)).encode())
            jobs.update({(group, name): job for name, job in found.items()})
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            running = {pool.submit(job): key for key, job in jobs.items()}
            for future in concurrent.futures.as_completed(running):
                _write(directory, *running[future], _outcome(future))
    except BaseException:
        shared_files.write_whole(directory / _FAILED, traceback.format_exc().encode())
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
