"""Run `python -m stacks <command> ...` inside the test process: `run_stacks("plan", "--list-gpus")`.

The same `stacks.cli.main` the module entry point calls, with stdout and stderr captured and an
argparse `SystemExit` turned into the exit code, so a test reads `.returncode`, `.stdout` and
`.stderr` as from `subprocess.run` without paying a new interpreter's imports (Pulumi and both
providers: about 1.5 s of CPU each time). Keep a real subprocess only where the process boundary is
what the test is about (`python -m stacks` itself, a closed pipe, the exit status of the process).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from stacks import cli
from stacks.config.files import PROJECT_DIR


@dataclass(frozen=True)
class Ran:
    """What `subprocess.run(..., capture_output=True, text=True)` returns, for the fields tests read."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(cwd: Path, env: Mapping[str, str] | None) -> Iterator[None]:
    """The working directory and, when given, exactly this environment, both restored afterwards."""
    with contextlib.chdir(cwd), mock.patch.dict(os.environ, env if env is not None else {},
                                                clear=env is not None):
        yield


def run_main(main: Callable[[], int], args: tuple[str, ...] = (), cwd: Path = PROJECT_DIR,
             env: Mapping[str, str] | None = None) -> Ran:
    """Call `main()` (any command's entry point) with captured output; `env` replaces os.environ."""
    out, err = io.StringIO(), io.StringIO()
    with _environment(cwd, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main()
        except SystemExit as exit_:  # argparse's usage errors and --help
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return Ran(args, code, out.getvalue(), err.getvalue())


def run_stacks(*args: str, cwd: Path = PROJECT_DIR, env: Mapping[str, str] | None = None) -> Ran:
    """`python -m stacks *args` in this process: its exit code and everything it printed."""
    return run_main(lambda: cli.main(list(args)), args, cwd, env)
