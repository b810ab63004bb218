"""`python -m stacks verify`'s runs with a load test, for tests/stacks/cli/test_verify.py: each against
its own local OpenAI-compatible server (tests/support/openai_server.py), with the load at its shortest
(2 requests at a time, the 1 s ramp and 1 s of load), so each waits about 2.5 s on its server and
computes almost nothing. Two are Ctrl-C mid-load: one in this process (stderr raises KeyboardInterrupt
as the steady phase begins), one a process of its own sent SIGINT; and one is a process whose stdout
closes before the report is written."""

from __future__ import annotations

import functools
import io
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from stacks.cli import verify
from stacks.config import files as stack_files
from tests.support.openai_server import KEY, Behaviour, OpenAIServer

SHORT = ["--concurrency", "2", "--duration", "1", "--output-tokens", "12"]
# The progress line that starts the measured part of the load test: by then the warm-up requests completed.
STEADY = "url load: steady: "
# `python -m stacks` as a shell starts it, but with Python's own SIGINT handler installed in any case: a process
# inherits an ignored SIGINT (a runner started in the background), and Python then installs none.
ENTRY_POINT = ("import runpy, signal\n"
               "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
               "runpy.run_module('stacks', run_name='__main__', alter_sys=True)\n")


class CtrlCAt(io.StringIO):
    """A stderr that raises KeyboardInterrupt, as Ctrl-C does in what the main thread runs, once a line holding
    `text` has been written to it."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.pressed = text, False

    def write(self, s: str) -> int:
        written = super().write(s)
        if not self.pressed and self.text in s:
            self.pressed = True
            raise KeyboardInterrupt
        return written


def _verify_with_load(key_file: Path, behaviour: Behaviour, *extra: str,
                      err: io.StringIO | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), err or io.StringIO()
    with OpenAIServer(behaviour) as url:
        code = verify.main(["dev", "--url", url, *SHORT, "--api-key-file", str(key_file), *extra], out, err,
                           stack_path=stack_files.find_stack_file)
    return code, out.getvalue(), err.getvalue()


def _sigint_mid_load(key_file: Path) -> tuple[int, str, str]:
    """`python -m stacks verify` in a process of its own, a load test of a minute sent SIGINT (Ctrl-C) as its
    steady phase begins. Its stderr is a pipe, so its progress is plain lines."""
    with OpenAIServer(Behaviour()) as url:
        command = [sys.executable, "-c", ENTRY_POINT, "verify", "dev", "--url", url, "--concurrency", "2",
                   "--duration", "60", "--output-tokens", "12", "--api-key-file", str(key_file)]
        with subprocess.Popen(command, cwd=stack_files.PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as process:
            assert process.stderr is not None
            said = []
            for line in process.stderr:  # ends early if it fails before the load: the test then reads why
                said.append(line)
                if STEADY in line:
                    process.send_signal(signal.SIGINT)
                    break
            try:
                out, rest = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:  # SIGINT did not stop it: the test fails on the code, not a hang
                process.kill()
                out, rest = process.communicate()
    return process.returncode, out, "".join(said) + rest


def _closed_stdout(key_file: Path) -> tuple[int, str, str]:
    """`python -m stacks verify ... | head -1` with a reader gone before the report is written (the smoke checks
    alone): its exit code and stderr."""
    with OpenAIServer(Behaviour()) as url:
        command = [sys.executable, "-m", "stacks", "verify", "dev", "--url", url, "--no-load",
                   "--api-key-file", str(key_file)]
        with subprocess.Popen(command, cwd=stack_files.PROJECT_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as process:
            assert process.stdout is not None and process.stderr is not None
            process.stdout.close()  # it writes to stdout only once the checks are done
            err = process.stderr.read()
            process.wait(timeout=60)
    return process.returncode, "", err


def jobs(scratch: Path) -> dict[str, Callable[[], tuple[int, str, str]]]:
    """Each run's (exit code, stdout, stderr) by name. The key is in a file in `scratch`, so no run reads
    the environment, which the module's other tests change."""
    key_file = scratch / "verify-api-key"
    key_file.write_text(KEY)
    return {"correct": functools.partial(_verify_with_load, key_file, Behaviour()),
            "json-no-auth": functools.partial(_verify_with_load, key_file, Behaviour(check_key=False), "--json"),
            "buffered": functools.partial(_verify_with_load, key_file, Behaviour(buffer=True)),
            "json-ctrl-c": functools.partial(_verify_with_load, key_file, Behaviour(), "--json",
                                             err=CtrlCAt(STEADY)),
            "sigint": functools.partial(_sigint_mid_load, key_file),
            "closed-stdout": functools.partial(_closed_stdout, key_file)}
