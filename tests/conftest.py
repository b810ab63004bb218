"""Session fixtures: each stack file rendered once per test process, and a scratch project directory.

The stack tier asserts through whole renders (golden snapshots, schemas, CRDs, chart values, engine flags);
`render_file` renders each stack file the first time a test of the process asks for it. Tests of one
component's behaviour use the component tier instead (tests/support/components.py), which renders only that
component.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from stacks.config.files import PROJECT_DIR
from stacks.offline import render

STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
STACK_NAMES = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_FILES]


@functools.cache
def _render(path: Path) -> render.RenderResult:
    return render.render_stack(path)


def render_file(path: Path) -> render.RenderResult:
    """A stack file's render, once per test process (a render takes about a second)."""
    return _render(path.resolve())


@pytest.fixture(scope="session")
def rendered() -> dict[str, render.RenderResult]:
    return {name: render_file(path) for name, path in zip(STACK_NAMES, STACK_FILES, strict=True)}


@pytest.fixture
def stack_dir(tmp_path: Path) -> Path:
    """A scratch project directory holding copies of the repo's project and stack files."""
    for path in (*STACK_FILES, PROJECT_DIR / "Pulumi.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    return tmp_path
