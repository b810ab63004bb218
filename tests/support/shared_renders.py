"""Renders shared between the xdist workers of one run: each (code, stack file, files it read) once.

A render is a function of the project's code, the stack file and the files the program reads while
it runs (the stack files it extends), and is byte-identical for the same input
(tests/components/test_serving_stack.py). So a worker that needs a stack another worker rendered
loads that worker's result instead of rendering again:

- the key is a digest of the code (every project file but the tests and the stack files, as the
  diff's sides digest it), the stack file's name and its bytes: a change to any of them is another
  key, so a test still fails when the code changes;
- while rendering, an audit hook records every other non-code file the process opens; the entry
  stores each one's digest (relative to the stack's directory when inside it), and a lookup whose
  files differ renders again. So two scratch directories holding the same variant share one render,
  and a variant that extends a different base does not;
- a render whose output names its own directory (it would differ per directory) is not shared;
- the entry is written under the key's lock (`fcntl.flock`), to a temporary file renamed into place:
  a second worker asking for the same key waits for the first instead of rendering it too, and no
  reader ever sees half a pickle. The directory lives in the run's temporary root, so a new run
  renders everything again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

from stacks.offline import render as offline_render
from stacks.offline import sides
from tests.support import shared_files

_shared_dir: Path | None = None
_opened: list[str] | None = None  # the files opened during the render in progress, else None
_NOT_INPUTS = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
_CODE_SUFFIXES = (".py", ".pyc", ".so")


def _record_opens(event: str, args: tuple[object, ...]) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_record_opens)


def share_in(directory: Path) -> None:
    """Share renders through `directory` (created if missing) from now on."""
    global _shared_dir
    directory.mkdir(parents=True, exist_ok=True)
    _shared_dir = directory


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@contextlib.contextmanager
def _recording() -> Iterator[list[str]]:
    global _opened
    opened: list[str] = []
    _opened = opened
    try:
        yield opened
    finally:
        _opened = None


def _inputs(opened: list[str], stack_file: Path) -> list[tuple[str, str]] | None:
    """The data files the render read, as (path relative to the stack's directory or absolute,
    digest); None when one of them cannot be read again."""
    found: dict[str, str] = {}
    for name in opened:
        path = Path(name).resolve()
        if path == stack_file or path.suffix in _CODE_SUFFIXES or str(path).startswith(_NOT_INPUTS):
            continue
        if not path.is_file():
            continue
        digest = _digest(path)
        if digest is None:
            return None
        inside = path.is_relative_to(stack_file.parent)
        found[str(path.relative_to(stack_file.parent)) if inside else str(path)] = digest
    return sorted(found.items())


def _inputs_unchanged(inputs: list[tuple[str, str]], stack_file: Path) -> bool:
    return all(_digest(stack_file.parent / name) == digest for name, digest in inputs)


def _key(stack_file: Path) -> str:
    code = sides._running_code()  # noqa: SLF001 - the digest the diff uses for "this process's code"
    key = hashlib.sha256()
    for part in ((code or "no git").encode(), stack_file.name.encode(), stack_file.read_bytes()):
        key.update(part + b"\0")
    return key.hexdigest()


def _names_its_directory(result: offline_render.RenderResult, stack_file: Path) -> bool:
    return str(stack_file.parent) in json.dumps([result.resources, result.manifests])


def render(stack_file: Path, renderer: Callable[[Path], offline_render.RenderResult] | None = None,
           ) -> offline_render.RenderResult:
    """`render.render_stack(stack_file)` (or `renderer`'s), from another worker's render when it had the
    same input."""
    render_stack = renderer or offline_render.render_stack
    if _shared_dir is None:
        return render_stack(stack_file)
    key = _key(stack_file)
    entry = _shared_dir / f"{key}.pickle"
    with shared_files.locked(_shared_dir / f"{key}.lock"):
        if entry.is_file():
            inputs, result = pickle.loads(entry.read_bytes())
            if _inputs_unchanged(inputs, stack_file):
                return result
        with _recording() as opened:
            result = render_stack(stack_file)
        inputs = _inputs(opened, stack_file)
        if inputs is not None and not _names_its_directory(result, stack_file):
            shared_files.write_whole(entry, pickle.dumps((inputs, result), protocol=pickle.HIGHEST_PROTOCOL))
        return result


@contextlib.contextmanager
def from_the_session() -> Iterator[None]:
    """While it lasts, `render.render_stack` of a stack file at its own cluster version is `render()`:
    the render another test (or worker) made of the same input, for a test whose subject is what a
    command does with a render (write it, summarise it, diff it), not the render itself. A render at
    another cluster version runs as it would."""
    real = offline_render.render_stack

    def render_stack(stack_file: Path, cluster_version: str | None = None) -> offline_render.RenderResult:
        if cluster_version is not None:
            return real(stack_file, cluster_version)
        return render(stack_file, renderer=real)

    with mock.patch.object(offline_render, "render_stack", render_stack):
        yield
