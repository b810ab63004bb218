"""The two renders of a diff: in this process when a side's code is the code running here, else in a
subprocess that imports the side's own code.

A side is a project directory (the working tree, or the base exported from git) and one stack file
in it. Its render is a function of its code (every file but the tests and the stack files), its
stack files (one may extend another) and the installed packages, and it is byte-identical for the
same input (tests/components/test_serving_stack.py). So when a side's code is byte-identical to the
code this process runs, rendering it here gives the resources a subprocess would write, without a
second interpreter importing Pulumi and both providers first (about 4 s of CPU per side, most of a
stack-file-only diff). A side whose code differs (a refactor, a base before a change to a component)
runs `python -m stacks render` in a subprocess with PYTHONPATH at its directory, importing its own code.

Renders are remembered for the process by (code, stack files, stack file): two sides with the same
code and stack files (a diff with no change) render once, and `diff` of every stack re-renders nothing
it has seen.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stacks.config import files as stack_files
from stacks.config.problems import ConfigError
from stacks.offline import render

RENDER_TIMEOUT_SECONDS = 300
ERROR_TAIL_LINES = 20
# Never read by the program, and absent from an exported base's comparison on purpose: the suite's
# scratch repositories leave them out, and a change to a test changes no render.
_NOT_RENDER_INPUTS = ("tests/",)

Resources = list[dict[str, Any]]
# As JSON text: each caller parses its own copy, so nothing it changes reaches the next diff.
_renders: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Side:
    """One project directory to render `stack_file` (relative to it) in, and how to list its files."""

    directory: Path
    label: str  # for messages: "the working tree", "the base, main (abc1234),"
    in_git: bool  # a working tree (list what git tracks or would track) or an exported tree (list all)


def _files(directory: Path, in_git: bool) -> list[str] | None:
    """Relative paths of the side's files; None when a working tree's listing fails (no git)."""
    if in_git:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=directory, capture_output=True, check=False)
        if listed.returncode != 0:
            return None
        names = [n for n in listed.stdout.decode().split("\0") if n]
    else:
        names = [str(p.relative_to(directory)) for p in directory.rglob("*")]
    # A tracked file deleted in the working tree is listed by git but is not part of the side.
    return sorted(n for n in names if "__pycache__" not in n.split("/") and (directory / n).is_file())


def _digests(directory: Path, in_git: bool) -> tuple[str, str] | None:
    """(code, stack files) digests of a side: every file's path and bytes, stack files apart."""
    names = _files(directory, in_git)
    if names is None:
        return None
    code, stacks = hashlib.sha256(), hashlib.sha256()
    for name in names:
        if name.startswith(_NOT_RENDER_INPUTS):
            continue
        digest = stacks if stack_files.STACK_FILE.match(Path(name).name) else code
        digest.update(name.encode() + b"\0" + (directory / name).read_bytes() + b"\0")
    return code.hexdigest(), stacks.hexdigest()


@functools.cache
def _running_code() -> str | None:
    """The digest of the code this process imported (the project it runs from), once per process."""
    found = _digests(stack_files.PROJECT_DIR, in_git=True)
    return found[0] if found else None


def _start(side: Side, stack_file: str, out_dir: Path) -> subprocess.Popen[str]:
    """Render in a process whose imports resolve to the side's directory only (its own code)."""
    env = {**os.environ, "PYTHONPATH": str(side.directory), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = ["render", stack_file, "--out", str(out_dir), "--quiet"]
    return subprocess.Popen(
        [sys.executable, "-m", "stacks", *argv],
        cwd=side.directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _failed(side: Side, tail: list[str]) -> list[str]:
    return [f"diff: {side.label} does not render:", *(f"  {line}" for line in tail[-ERROR_TAIL_LINES:])]


def _finish(process: subprocess.Popen[str], out_dir: Path, side: Side) -> tuple[Resources, list[str]]:
    """The rendered resources, or the lines explaining why the render failed."""
    try:
        _, stderr = process.communicate(timeout=RENDER_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return [], [f"diff: rendering {side.label} took longer than {RENDER_TIMEOUT_SECONDS} s"]
    resources_file = out_dir / "resources.json"
    if process.returncode != 0 or not resources_file.is_file():
        # The render prints one masked line per config problem; a crash ends with its exception.
        return [], _failed(side, stderr.strip().splitlines() or [f"exit code {process.returncode}"])
    return json.loads(resources_file.read_text()), []


def _render_here(side: Side, stack_file: str) -> tuple[Resources, list[str]]:
    """The same resources and error lines as `_start` + `_finish`, from this process's code."""
    output = io.StringIO()  # what the program prints goes where the subprocess's output went: nowhere
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            result = render.render_stack(side.directory / stack_file)
    except ConfigError as error:  # `python -m stacks render` prints these lines and exits 2
        return [], _failed(side, [p.line() for p in error.problems])
    except Exception:  # noqa: BLE001 - a crash of the side's program, reported as the subprocess's would be
        return [], _failed(side, traceback.format_exc().strip().splitlines())
    # Through JSON, as from the subprocess's resources.json: lists, not tuples; the same numbers.
    return json.loads(json.dumps(result.resources, sort_keys=True)), []


def _twin(results: list[tuple[Resources, list[str]]], earlier: int, side: Side,
          stack_file: str) -> tuple[Resources, list[str]]:
    resources, errors = results[earlier]
    if errors:
        return _render_here(side, stack_file)
    return json.loads(json.dumps(resources)), []


def render_sides(sides: list[Side | None], stack_file: str, scratch: Path) -> list[tuple[Resources, list[str]]]:
    """Each side's (resources, error lines); a None side renders nothing. Subprocesses start first
    and run while this process renders the sides it can, so on two cores they overlap."""
    running = _running_code()
    pending: list[tuple[tuple[str, str, str] | None, Callable[[], tuple[Resources, list[str]]]]] = []
    results: list[tuple[Resources, list[str]]] = []
    first_with: dict[tuple[str, str, str], int] = {}  # key -> the index of the side that renders it
    for index, side in enumerate(sides):
        if side is None:
            pending.append((None, lambda: ([], [])))
            continue
        digests = _digests(side.directory, side.in_git)
        key = (*digests, stack_file) if digests else None
        if key in _renders:
            # (A default argument binds the key; mypy cannot type a lambda with one.)
            pending.append((None, lambda key=key: (json.loads(_renders[key]), [])))  # type: ignore[misc]
        elif key in first_with:
            # The same code and stack files as an earlier side rendered here (a diff with no change): its
            # render, copied (finished first, as the pending list runs in order); if that one failed, this
            # side renders itself, so its error lines carry its own label.
            pending.append((None, functools.partial(_twin, results, first_with[key], side, stack_file)))
        elif key is not None and key[0] == running:
            first_with[key] = index
            pending.append((key, functools.partial(_render_here, side, stack_file)))
        else:
            out_dir = scratch / f"render-{index}"
            pending.append((key, functools.partial(_finish, _start(side, stack_file, out_dir), out_dir, side)))
    for key, finish in pending:
        resources, errors = finish()
        if key is not None and not errors:
            _renders[key] = json.dumps(resources)
        results.append((resources, errors))
    return results
