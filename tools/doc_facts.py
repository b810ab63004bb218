"""What the docs' generated figures read (tools/doc_figures.py): the stack files, the planner as
`python -m stacks plan --json` prints it, the offline render and the collected test suite, each computed
once per run."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

from stacks.config.files import PROJECT_DIR, stack_file_path

# The seed's model as prod serves it: the figures the docs quote for "prod's 70B".
PROD = "prod"


def run_plan(argv: Iterable[str]) -> tuple[int, str]:
    """`python -m stacks plan <argv>` in this process: (exit code, stdout + stderr)."""
    from stacks.cli import plan as plan_cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = plan_cli.main(list(argv), out, err)
    return code, out.getvalue() + err.getvalue()


def collected_test_count() -> int:
    """Tests `make test` runs, as pytest collects them (without the suite's addopts, so parallel
    workers do not change the count)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider"],
        cwd=PROJECT_DIR, capture_output=True, text=True, check=False,
    )
    match = re.search(r"(\d+) tests? collected", done.stdout)
    if not match:
        raise SystemExit(f"pytest --collect-only gave no count:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return int(match[1])


class Facts:
    """What the generators read, each computed once. `render` renders a stack file (tests pass their
    session cache, so the staleness test costs no render of its own); `test_count` is the collected
    suite when the caller knows it."""

    def __init__(self, render: Callable[[Path], Any] | None = None, test_count: int | None = None) -> None:
        self._render = render
        self._test_count = test_count
        self._renders: dict[Path, Any] = {}
        self._plans: dict[tuple[str, ...], dict[str, Any]] = {}

    @property
    def test_count(self) -> int:
        if self._test_count is None:
            self._test_count = collected_test_count()
        return self._test_count

    def render(self, path: Path) -> Any:
        if path not in self._renders:
            if self._render is None:
                from stacks.offline import render

                self._renders[path] = render.render_stack(path)
            else:
                self._renders[path] = self._render(path)
        return self._renders[path]

    def config(self, path: Path) -> Any:
        from stacks import environment

        return environment.load_stack_file(path)[1]

    @cached_property
    def prod(self) -> Any:
        return self.config(stack_file_path(PROD))

    @cached_property
    def prod_model(self) -> Any:
        return self.prod.models[0]

    def plan(self, *argv: str) -> dict[str, Any]:
        """The plan as `plan --json` prints it."""
        if argv not in self._plans:
            code, output = run_plan([*argv, "--json"])
            if code != 0:
                raise SystemExit(f"plan {' '.join(argv)} failed ({code}): {output}")
            self._plans[argv] = json.loads(output)
        return self._plans[argv]

    def stack_plan(self, stack: str = PROD) -> dict[str, Any]:
        config = self.config(stack_file_path(stack))
        return self.plan("--stack", stack, "--model", config.models[0].name)

    def manifest(self, stack: str, kind: str, name: str) -> dict[str, Any]:
        return self.render(stack_file_path(stack).resolve()).manifest(kind, name)
