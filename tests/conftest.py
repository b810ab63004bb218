"""Shared fixtures: offline renders of stack files under Pulumi's mock runtime, cached per file."""

from __future__ import annotations

from pathlib import Path

import pytest

from stacks.config.files import PROJECT_DIR
from stacks.offline import render

STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
STACK_NAMES = [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_FILES]

_cache: dict[Path, render.RenderResult] = {}


def render_file(path: Path) -> render.RenderResult:
    """Render a stack file once per session (a render takes about a second)."""
    path = path.resolve()
    if path not in _cache:
        _cache[path] = render.render_stack(path)
    return _cache[path]


@pytest.fixture(scope="session")
def rendered() -> dict[str, render.RenderResult]:
    return {name: render_file(path) for name, path in zip(STACK_NAMES, STACK_FILES, strict=True)}


@pytest.fixture
def stack_dir(tmp_path: Path) -> Path:
    """A scratch project directory holding copies of the repo's project and stack files."""
    for path in (*STACK_FILES, PROJECT_DIR / "Pulumi.yaml"):
        (tmp_path / path.name).write_text(path.read_text())
    return tmp_path
